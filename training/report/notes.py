"""The prompt the end-of-run summary suggests, from the data's own valid split.
The text work is pure (`prompt_from_text`); `valid_prompt` reads the start of a
build's valid split. (Why a search derived no attention block is the PAR search's
own line: `training.plugins.par_search.summaries.no_attention_note`.)"""

import itertools

# The suggested prompt takes at most this many words of a line of the valid split.
PROMPT_WORDS = 3
# At most this many records of the valid split (row 0 of each) are read for the prompt.
PROMPT_RECORDS = 256
_SPECIAL = ("<unk>", "<eos>", "<sp_unk>")


def prompt_from_text(text, max_words=PROMPT_WORDS):
    """The first words of the first line of `text` that starts as prose, or None.

    Skipped: empty lines and WikiText headings (` = Title = `). After its leading
    punctuation (an opening quote), a line's words are taken up to the first one
    without a letter or digit (punctuation, `@-@`) or a special token (`<unk>`), at
    most `max_words`.
    """
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("="):
            continue
        while words and not any(ch.isalnum() for ch in words[0]):
            words.pop(0)
        taken = []
        for word in words[:max_words]:
            if word in _SPECIAL or not any(ch.isalnum() for ch in word):
                break
            taken.append(word)
        if taken:
            return " ".join(taken)
    return None


def valid_prompt(data_dir):
    """`prompt_from_text` of the valid split's words, or None when the build cannot be read
    (the summary then keeps its generic prompt).

    The split's tail (its ids after the last record, `{split}-tail.txt`) is read first:
    plain text, no TensorFlow, so a finished command's summary comes at once; a tail
    without a usable line falls back to the start of the split's records.
    """
    from pardata.errors import DataError
    from pardata.meta import load_meta, tail_path
    from pardata.tokenizers import load_tokenizer_files

    try:
        meta = load_meta(data_dir)
        if "valid" not in meta["splits"]:
            return None
        tokenizer = load_tokenizer_files(data_dir, meta["tokenizer"])
        with open(tail_path(data_dir, "valid", meta["splits"]["valid"]), encoding="ascii") as f:
            tail = [int(x) for x in f.read().split()]
        text = tokenizer.decode([i for i in tail if 0 <= i < tokenizer.vocab_size])
        # From its first sentence (the tail starts mid-sentence), or its first whole line.
        start = min((i + 2 for i in (text.find(". "), text.find("\n") - 1) if i >= 0),
                    default=0)
        prompt = prompt_from_text(text[start:])
    except (DataError, OSError, ValueError):
        return None
    return prompt or _records_prompt(data_dir, meta, tokenizer)


def _records_prompt(data_dir, meta, tokenizer):
    """`prompt_from_text` of the start of the valid split's records (TensorFlow)."""
    import tensorflow as tf

    from pardata.errors import DataError
    from pardata.records import make_dataset

    try:
        records = make_dataset(data_dir, "valid", meta=meta, verify=False)
        ids = []
        for count, (inputs, _) in enumerate(itertools.islice(records, PROMPT_RECORDS), 1):
            ids += [int(i) for i in inputs.numpy()[0]]  # row 0: the split's start
            if count % 8 == 0:  # its complete lines so far
                prompt = prompt_from_text(tokenizer.decode(ids).rpartition("\n")[0])
                if prompt:
                    return prompt
    except (DataError, OSError, ValueError, tf.errors.OpError):
        return None
    return prompt_from_text(tokenizer.decode(ids))
