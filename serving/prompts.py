"""Text prompts: encoding a prompt for generation, the ids never generated, and decoding
what follows it."""

import dataclasses
import weakref

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


def stop_strings(stop):
    """The stop strings of `stop` (None, a str or a list of str), checked.

    Raises:
        GenerationError: an empty stop string, or not strings.
    """
    if stop is None:
        return ()
    values = [stop] if isinstance(stop, str) else stop
    if not isinstance(values, (list, tuple)) or not values or not all(
            isinstance(v, str) for v in values):
        raise GenerationError(f"stop={stop!r} must be a string or a non-empty list of strings")
    if any(v == "" for v in values):
        raise GenerationError("stop holds an empty string, which would end every continuation "
                              "before its first token: give the text to stop at, e.g. "
                              "stop='\\n' (the end of the line)")
    return tuple(dict.fromkeys(values))


# tokenizer -> its `token_texts` (computed once: about 0.1 s for 12k sentencepiece ids).
_TOKEN_TEXTS = weakref.WeakKeyDictionary()


def token_texts(tokenizer):
    """Each id's own text, `tokenizer.decode([i])` ("" for an id that does not decode
    alone), as a tuple; made once per tokenizer."""
    texts = _TOKEN_TEXTS.get(tokenizer)
    if texts is None:
        texts = []
        for i in range(tokenizer.vocab_size):
            try:
                texts.append(tokenizer.decode([i]))
            except (ValueError, RuntimeError, UnicodeError, DataError):
                texts.append("")
        texts = _TOKEN_TEXTS.setdefault(tokenizer, tuple(texts))
    return texts


def stop_token_ids(tokenizer, stops):
    """The ids whose own text holds a stop string: drawing one ends the row at once.

    A stop string spread over several tokens ends no row early; the text is
    still cut before it (`cut_at_stop`). "\\n" finds the line-end token (<eos>).
    """
    if not stops:
        return []
    return [i for i, text in enumerate(token_texts(tokenizer))
            if any(stop in text for stop in stops)]


def cut_at_stop(text, stops):
    """`text` up to the first occurrence of any of `stops` (which is not kept)."""
    cut = len(text)
    for stop in stops:
        found = text.find(stop)
        if found >= 0:
            cut = min(cut, found)
    return text[:cut]
