"""tools/spm_from_vocab.py: a model rebuilt from its .vocab encodes like the model."""

import subprocess
import sys

import pytest
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as model_pb2

from tests.helpers import PROJECT_ROOT
from tools import spm_from_vocab

ROOT = PROJECT_ROOT

SPECIALS = ["--unk_piece=[UNK]", "--bos_piece=[BOS]", "--eos_piece=[EOS]",
            "--pad_piece=[PAD]"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, wikitext2_root):
    """A model trained as the original PAR implementation trains its tokenizer
    (NFKC with case folding, @-@ user symbol, [PAD] [BOS] [EOS] [UNK] = 0..3),
    with the .vocab file sentencepiece writes next to it."""
    directory = tmp_path_factory.mktemp("spm")
    spm.SentencePieceTrainer.train(
        input=str(wikitext2_root / "wikitext-2" / "wiki.valid.tokens"),
        model_prefix=str(directory / "m"), vocab_size=800, user_defined_symbols="@-@",
        normalization_rule_name="nfkc_cf", pad_id=0, bos_id=1, eos_id=2, unk_id=3,
        pad_piece="[PAD]", bos_piece="[BOS]", eos_piece="[EOS]", unk_piece="[UNK]",
        minloglevel=2)
    return directory


def test_rebuilt_model_encodes_like_the_original(trained, wikitext2_root, tmp_path):
    out = tmp_path / "rebuilt.model"
    assert spm_from_vocab.main([str(trained / "m.vocab"), f"--out={out}",
                                "--normalization=nfkc_cf", "--user_symbols=@-@",
                                *SPECIALS]) == 0
    original = spm.SentencePieceProcessor(model_file=str(trained / "m.model"))
    rebuilt = spm.SentencePieceProcessor(model_file=str(out))
    text = (wikitext2_root / "wikitext-2" / "wiki.test.tokens").read_text(encoding="utf-8")
    lines = text.split("\n")[:1500]
    assert rebuilt.encode(lines) == original.encode(lines)
    assert rebuilt.encode("The CAT @-@ Dog <unk>", out_type=str) == \
        original.encode("The CAT @-@ Dog <unk>", out_type=str)
    for name in ("unk_id", "bos_id", "eos_id", "pad_id", "get_piece_size"):
        assert getattr(rebuilt, name)() == getattr(original, name)()
    # The pieces themselves: names, types (user symbol, control, unknown) and
    # scores (the .vocab rounds them to 6 digits).
    want, got = model_pb2.ModelProto(), model_pb2.ModelProto()
    want.ParseFromString((trained / "m.model").read_bytes())
    got.ParseFromString(out.read_bytes())
    assert [(p.piece, p.type) for p in got.pieces] == [(p.piece, p.type) for p in want.pieces]
    assert max(abs(a.score - b.score) for a, b in zip(got.pieces, want.pieces)) < 1e-4
    assert got.normalizer_spec == want.normalizer_spec
    # Without case folding the same pieces segment capitals differently: the
    # normalizer really comes from --normalization.
    plain = tmp_path / "plain.model"
    assert spm_from_vocab.main([str(trained / "m.vocab"), f"--out={plain}",
                                "--normalization=identity", "--user_symbols=@-@",
                                *SPECIALS]) == 0
    identity = spm.SentencePieceProcessor(model_file=str(plain))
    assert identity.encode("THE") != original.encode("THE")


def test_errors_are_one_line_and_write_nothing(trained, tmp_path, capsys):
    bad = tmp_path / "bad.vocab"
    out = tmp_path / "never.model"
    cases = [
        ("[UNK]\t0\nabc\n", "line 2 is not '<piece>\\\\t<score>'"),
        ("[UNK]\t0\nab\tnan\n", "line 2 is not"),
        ("[UNK]\t0\nab\t-1\n\n", "line 3 is not"),  # a blank line
        ("[UNK]\t0\n<0x00>\t0\n", "has 1 of the 256 byte pieces"),
        ("[UNK]\t0\nab\t-1\nab\t-2\n", "piece 'ab' appears twice"),
        ("", "is empty"),
    ]
    for text, message in cases:
        bad.write_text(text, encoding="utf-8")
        assert spm_from_vocab.main([str(bad), f"--out={out}", *SPECIALS[:1],
                                    "--bos_piece=", "--eos_piece="]) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1
        assert message.replace("\\\\", "\\") in err, err
    assert spm_from_vocab.main([str(trained / "m.vocab"), f"--out={out}"]) == 1
    assert "--unk_piece='<unk>' is not in the vocabulary" in capsys.readouterr().err
    assert spm_from_vocab.main([str(tmp_path / "missing.vocab"), f"--out={out}"]) == 1
    assert "cannot read" in capsys.readouterr().err
    assert spm_from_vocab.main([str(trained / "m.vocab"), f"--out={out}", *SPECIALS,
                                "--user_symbols=[EOS]"]) == 1
    assert "must all be different pieces" in capsys.readouterr().err
    missing_dir = tmp_path / "no" / "such" / "dir.model"
    assert spm_from_vocab.main([str(trained / "m.vocab"), f"--out={missing_dir}",
                                "--user_symbols=@-@", *SPECIALS]) == 1
    assert (f"error: cannot write --out={missing_dir}: No such file or directory (ENOENT)\n"
            == capsys.readouterr().err)
    assert not (tmp_path / "no").exists()
    assert not [p.name for p in tmp_path.iterdir() if "never.model" in p.name]  # no temporary


def test_cli(trained, tmp_path):
    out = tmp_path / "cli.model"
    done = subprocess.run([sys.executable, "-m", "tools.spm_from_vocab",
                           str(trained / "m.vocab"), f"--out={out}", "--normalization=nfkc_cf",
                           "--user_symbols=@-@", *SPECIALS],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "800 pieces, nfkc_cf normalization, unk id 3, eos id 2" in done.stdout


def test_byte_fallback_and_bom(wikitext2_root, tmp_path):
    """A byte-fallback model's <0x..> pieces become byte pieces again, and a
    .vocab saved with a BOM reads like one without."""
    spm.SentencePieceTrainer.train(
        input=str(wikitext2_root / "wikitext-2" / "wiki.valid.tokens"),
        model_prefix=str(tmp_path / "b"), vocab_size=600, byte_fallback=True, minloglevel=2)
    vocab = tmp_path / "bom.vocab"
    vocab.write_bytes(b"\xef\xbb\xbf" + (tmp_path / "b.vocab").read_bytes())
    out = tmp_path / "b_rebuilt.model"
    assert spm_from_vocab.main([str(vocab), f"--out={out}"]) == 0
    original = spm.SentencePieceProcessor(model_file=str(tmp_path / "b.model"))
    rebuilt = spm.SentencePieceProcessor(model_file=str(out))
    text = "naïve 日本 ☃ text"
    assert rebuilt.encode(text) == original.encode(text)
    assert original.unk_id() not in original.encode(text)  # bytes, not <unk>
