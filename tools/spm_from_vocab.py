r"""Rebuilds a sentencepiece `.model` from its `.vocab` file.

A sentencepiece vocabulary file ("<piece>\t<score>" per line, in id order) is
what projects often publish as text; it holds every piece and score. This tool
takes the normalizer (and the special pieces' names) from a throwaway model
trained here with the same options, puts the published pieces and scores in
it, and checks the result loads with the special ids where the vocabulary has
them. Byte pieces (<0x00>..<0xFF>, all 256) turn byte fallback on. Options a
.vocab file cannot show keep sentencepiece's defaults: a dummy space prefix,
extra whitespace removed, whitespace as a prefix (not a suffix); a model
trained with other values of these encodes differently once rebuilt.

The original PAR implementation's tokenizer (12k unigram, NFKC with case
folding, `@-@` as a user symbol; its repository's tokenizer/wiki2_12k.vocab):

    python -m tools.spm_from_vocab wiki2_12k.vocab --out=data/raw/par_wiki2_12k.model \
        --normalization=nfkc_cf --user_symbols=@-@ --unk_piece='[UNK]' \
        --bos_piece='[BOS]' --eos_piece='[EOS]' --pad_piece='[PAD]'

Errors a user can fix end in one `error: ...` line and exit status 1; the
output is written to a temporary file and renamed, so it is never half-written.
"""

import argparse
import io
import math
import re
import sys

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as model_pb2

from runstore import run_dir

NORMALIZATIONS = ("identity", "nfkc", "nfkc_cf", "nmt_nfkc", "nmt_nfkc_cf")
_TYPES = model_pb2.ModelProto.SentencePiece
_BYTE_PIECE = re.compile(r"^<0x[0-9A-F]{2}>$")


class VocabError(ValueError):
    """A problem with the inputs that the user can fix."""


def read_vocab(path):
    """[(piece, score)] of a .vocab file, in id order."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            text = f.read()
    except OSError as e:
        raise VocabError(f"cannot read {path}: {e.strerror}; check the vocabulary path") from None
    except UnicodeDecodeError:
        raise VocabError(f"{path} is not UTF-8 text; give a sentencepiece .vocab file") from None
    entries, seen = [], set()
    for number, line in enumerate(text.split("\n"), 1):
        if not line and number == text.count("\n") + 1:
            break  # the newline after the last entry
        piece, tab, score = line.partition("\t")
        try:
            value = float(score)
        except ValueError:
            value = None
        if not tab or not piece or value is None or not math.isfinite(value):
            raise VocabError(f"{path} line {number} is not '<piece>\\t<score>': {line[:60]!r}")
        if piece in seen:
            raise VocabError(f"{path} line {number}: piece {piece!r} appears twice")
        seen.add(piece)
        entries.append((piece, value))
    if not entries:
        raise VocabError(f"{path} is empty; give a sentencepiece .vocab file")
    return entries


def _template(entries, args):
    """A small model trained with the options: its normalizer and special names."""
    pieces = [p for p, _ in entries]
    specials = {"unk": args.unk_piece, "bos": args.bos_piece, "eos": args.eos_piece,
                "pad": args.pad_piece}
    for name, piece in specials.items():
        if piece and piece not in pieces:
            raise VocabError(f"--{name}_piece={piece!r} is not in the vocabulary; give the "
                             "name it has there" + (" (or '' for none)" if name != "unk" else ""))
    for symbol in args.user_symbols:
        if symbol not in pieces:
            raise VocabError(f"--user_symbols: {symbol!r} is not in the vocabulary")
    named = [p for p in specials.values() if p] + list(args.user_symbols)
    if len(set(named)) != len(named):
        raise VocabError("the --*_piece names and --user_symbols must all be different pieces")
    options = dict(unk_piece=args.unk_piece, unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1)
    next_id = 1
    for name in ("bos", "eos", "pad"):
        if specials[name]:
            options[f"{name}_piece"], options[f"{name}_id"] = specials[name], next_id
            next_id += 1
    buf = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(["a b"] * 4), model_writer=buf, model_type=args.model_type,
            vocab_size=next_id + len(args.user_symbols) + 3, hard_vocab_limit=False,
            normalization_rule_name=args.normalization, user_defined_symbols=args.user_symbols,
            character_coverage=1.0, minloglevel=2, **options)
    except RuntimeError as e:
        raise VocabError(f"sentencepiece refused these options: {e}") from None
    template = model_pb2.ModelProto()
    template.ParseFromString(buf.getvalue())
    return template


def build_model(entries, args):
    """(serialized ModelProto with `entries` as its pieces, its loaded processor)."""
    model = _template(entries, args)
    types = {args.unk_piece: _TYPES.UNKNOWN}
    types.update({p: _TYPES.CONTROL for p in (args.bos_piece, args.eos_piece, args.pad_piece)
                  if p})
    types.update({s: _TYPES.USER_DEFINED for s in args.user_symbols})
    byte_pieces = [p for p, _ in entries if _BYTE_PIECE.match(p)]
    if byte_pieces and len(byte_pieces) != 256:
        raise VocabError(f"the vocabulary has {len(byte_pieces)} of the 256 byte pieces "
                         "<0x00>..<0xFF>: byte fallback needs all of them")
    types.update({p: _TYPES.BYTE for p in byte_pieces})
    model.trainer_spec.byte_fallback = bool(byte_pieces)
    del model.pieces[:]
    for piece, score in entries:
        model.pieces.add(piece=piece, score=score, type=types.get(piece, _TYPES.NORMAL))
    index = {p: i for i, (p, _) in enumerate(entries)}
    spec = model.trainer_spec
    spec.vocab_size = len(entries)
    spec.unk_id = index[args.unk_piece]
    for name in ("bos", "eos", "pad"):
        piece = getattr(args, f"{name}_piece")
        setattr(spec, f"{name}_id", index[piece] if piece else -1)
    data = model.SerializeToString()
    try:
        sp = spm.SentencePieceProcessor(model_proto=data)
    except RuntimeError as e:
        raise VocabError(f"sentencepiece cannot load the rebuilt model: {e}") from None
    checks = [("pieces", sp.get_piece_size(), len(entries)),
              ("unk id", sp.unk_id(), index[args.unk_piece])]
    checks += [(f"{name} id", getattr(sp, f"{name}_id")(), index[piece])
               for name, piece in (("bos", args.bos_piece), ("eos", args.eos_piece),
                                   ("pad", args.pad_piece)) if piece]
    for what, got, want in checks:
        if got != want:
            raise VocabError(f"the rebuilt model has {what} {got}, the vocabulary {want}")
    return data, sp


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("vocab", help="sentencepiece .vocab file (<piece>\\t<score> per line)")
    parser.add_argument("--out", required=True, help="the .model file to write")
    parser.add_argument("--normalization", default="nmt_nfkc", choices=NORMALIZATIONS,
                        help="the normalization rule the model was trained with "
                             "(sentencepiece's default: nmt_nfkc)")
    parser.add_argument("--model_type", default="unigram", choices=["unigram", "bpe"])
    parser.add_argument("--unk_piece", default="<unk>", help="the unknown piece's name")
    parser.add_argument("--bos_piece", default="<s>", help="'' if the model has none")
    parser.add_argument("--eos_piece", default="</s>", help="'' if the model has none")
    parser.add_argument("--pad_piece", default="", help="'' (default) if the model has none")
    parser.add_argument("--user_symbols", default="",
                        help="comma-separated user-defined symbols of the model")
    args = parser.parse_args(argv)
    args.user_symbols = [s for s in args.user_symbols.split(",") if s]
    if not args.unk_piece:
        parser.error("--unk_piece must name the vocabulary's unknown piece")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        data, sp = build_model(read_vocab(args.vocab), args)
        try:
            run_dir.atomic_write(args.out, data)
        except run_dir.WriteError as e:
            raise VocabError(f"cannot write --out={args.out}: {e.reason}") from None
    except VocabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}: {sp.get_piece_size()} pieces, {args.normalization} "
          f"normalization, unk id {sp.unk_id()}, eos id {sp.eos_id()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
