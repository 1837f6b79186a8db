# Sourced by the entry scripts that change into the repository (base_model.sh,
# finetune.sh): the user's relative paths mean the directory the command was run from,
# as in every other script. The script sets ROOT (the repository) and CALLER (the
# directory it was run from) before sourcing this.

# A path flag's value as the user meant it: relative to where they ran the command.
# --architecture is a path only when it names one there (else a/f/i letters or a word).
from_caller() {
  local name="$1" value="$2"
  if [[ "$value" == /* || "$CALLER" == "$ROOT" || -z "$value" ]]; then
    printf '%s' "$value"
  elif [[ "$name" != architecture || "$value" == */* || -e "$CALLER/$value" ]]; then
    printf '%s' "$CALLER/$value"
  else
    printf '%s' "$value"
  fi
}

# caller_args "FLAG NAMES" ARGS...: ARGS into the array CALLER_ARGS, the value of every
# named flag (--name=value or --name value) resolved by from_caller.
caller_args() {
  local flags="$1" pending="" arg name
  shift
  CALLER_ARGS=()
  for arg in "$@"; do
    if [[ -n "$pending" ]]; then  # the value of a spaced --flag value
      CALLER_ARGS+=("$(from_caller "$pending" "$arg")")
      pending=""
      continue
    fi
    name="${arg#--}"
    name="${name%%=*}"
    if [[ " $flags " == *" $name "* && "$arg" == --* ]]; then
      if [[ "$arg" == *=* ]]; then
        arg="--$name=$(from_caller "$name" "${arg#*=}")"
      else
        pending="$name"
      fi
    fi
    CALLER_ARGS+=("$arg")
  done
}
