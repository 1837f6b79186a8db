# Sourced by the entry scripts (create_tfrecords.sh, base_model.sh): stop with one line
# when their interpreter ($PYTHON, default python3) is not the project's environment,
# before any work. absl is imported as the sign of the requirements (50 ms; TensorFlow
# would take seconds).
require_python() {
  local python="${PYTHON:-python3}"
  local name="${PYTHON:+PYTHON=}$python"
  local activate="activate the environment made in README's install section"
  activate+=" (. .venv/bin/activate)"
  if ! command -v "$python" >/dev/null 2>&1; then
    echo "error: $name not found: $activate${PYTHON:+ or set PYTHON to another interpreter}" >&2
    exit 1
  fi
  if ! "$python" -c 'import absl' >/dev/null 2>&1; then
    echo "error: $name cannot import the project's requirements (no module absl): $activate" \
      "or install them ($python -m pip install -r requirements.txt)" >&2
    exit 1
  fi
}
