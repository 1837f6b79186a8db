"""Text prompts: encoding a prompt for generation, the ids never generated, and decoding
what follows it."""

import dataclasses

from pardata.errors import DataError
from serving.errors import GenerationError


@dataclasses.dataclass(frozen=True)
class Prompt:
    """An encoded text prompt: the text as given, the ids fed to the model (never
    empty), the words mapped to the unknown token, and whether the prompt was
    empty so that `ids` is the tokenizer's line start (see `encode_prompt`)."""

    text: str
    ids: tuple
    unknown_words: tuple
    from_line_start: bool


def _unknown_id(tokenizer):
    for name, i in tokenizer.reserved_ids().items():
        if "unk" in name.lower():
            return i
    return None


def encode_prompt(tokenizer, text):
    """Encodes a text prompt for generation.

    An empty prompt (or one without tokens, e.g. only spaces) starts from the
    tokenizer's line start, `tokenizer.encode("\\n")`: <eos> for the word and
    sentencepiece tokenizers (and byte with eos), else the newline byte.

    Args:
        tokenizer: a `data_utils` tokenizer.
        text: str.

    Returns:
        A `Prompt`.

    Raises:
        GenerationError: the text is not valid Unicode or the tokenizer fails.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise GenerationError(f"the prompt is not valid UTF-8 text (bad character at position "
                              f"{error.start}): pass UTF-8 text") from None
    try:
        ids = tokenizer.encode(text)
        unknown, unk = [], _unknown_id(tokenizer)
        if unk is not None and unk in ids:
            literal = tokenizer.id_to_token(unk)
            for word in text.split():
                if word != literal and word not in unknown and unk in tokenizer.encode(word):
                    unknown.append(word)
        start = not ids
        if start and not tokenizer.line_ends:
            raise GenerationError(
                "the prompt is empty and this run's sentencepiece build has no line ends "
                "(build_data.py --nosp_eos), so there is no line start to begin from: give a "
                "non-empty --prompt or --prompt_file")
        if start:
            ids = tokenizer.encode("\n")
    except (ValueError, RuntimeError, UnicodeError, DataError) as error:
        raise GenerationError(f"the {tokenizer.kind} tokenizer cannot encode the prompt: "
                              f"{error}") from None
    return Prompt(text, tuple(int(i) for i in ids), tuple(unknown), start)


def excluded_ids(tokenizer, allow_unk=False):
    """The ids generation never draws: the tokenizer's unknown-word ids
    (`Tokenizer.unknown_ids()`, e.g. WikiText's <unk>) unless `allow_unk`."""
    return [] if allow_unk else tokenizer.unknown_ids()


def continuation_text(tokenizer, prompt, new_ids):
    """The text of `new_ids` to append to `prompt.text` (for the word tokenizer
    it starts with the separating space, or follows the newline of an <eos>)."""
    new_ids = [int(i) for i in new_ids]
    if prompt.from_line_start:
        return tokenizer.decode(new_ids)
    head = tokenizer.decode(list(prompt.ids))
    full = tokenizer.decode(list(prompt.ids) + new_ids)
    if full.startswith(head):
        return full[len(head):]
    return " " + tokenizer.decode(new_ids)
