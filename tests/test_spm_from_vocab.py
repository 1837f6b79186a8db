"""tools/spm_from_vocab.py: a model rebuilt from its .vocab encodes like the model."""

import pathlib
import subprocess
import sys

import pytest
import sentencepiece as spm

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import spm_from_vocab  # noqa: E402

SPECIALS = ["--unk_piece=[UNK]", "--bos_piece=[BOS]", "--eos_piece=[EOS]",
            "--pad_piece=[PAD]"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, shared_data):
    """A model trained as the original PAR implementation trains its tokenizer
    (NFKC with case folding, @-@ user symbol, [PAD] [BOS] [EOS] [UNK] = 0..3),
    with the .vocab file sentencepiece writes next to it."""
    directory = tmp_path_factory.mktemp("spm")
    spm.SentencePieceTrainer.train(
        input=str(shared_data / "wikitext-2" / "wiki.valid.tokens"),
        model_prefix=str(directory / "m"), vocab_size=800, user_defined_symbols="@-@",
        normalization_rule_name="nfkc_cf", pad_id=0, bos_id=1, eos_id=2, unk_id=3,
        pad_piece="[PAD]", bos_piece="[BOS]", eos_piece="[EOS]", unk_piece="[UNK]",
        minloglevel=2)
    return directory


def test_rebuilt_model_encodes_like_the_original(trained, shared_data, tmp_path):
    out = tmp_path / "rebuilt.model"
    assert spm_from_vocab.main([str(trained / "m.vocab"), f"--out={out}",
                                "--normalization=nfkc_cf", "--user_symbols=@-@",
                                *SPECIALS]) == 0
    original = spm.SentencePieceProcessor(model_file=str(trained / "m.model"))
    rebuilt = spm.SentencePieceProcessor(model_file=str(out))
    text = (shared_data / "wikitext-2" / "wiki.test.tokens").read_text(encoding="utf-8")
    lines = text.split("\n")[:1500]
    assert rebuilt.encode(lines) == original.encode(lines)
    assert rebuilt.encode("The CAT @-@ Dog <unk>", out_type=str) == \
        original.encode("The CAT @-@ Dog <unk>", out_type=str)
    for name in ("unk_id", "bos_id", "eos_id", "pad_id", "get_piece_size"):
        assert getattr(rebuilt, name)() == getattr(original, name)()
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
    assert not out.exists() and not (tmp_path / "never.model.tmp").exists()


def test_cli(trained, tmp_path):
    out = tmp_path / "cli.model"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "spm_from_vocab.py"),
                           str(trained / "m.vocab"), f"--out={out}", "--normalization=nfkc_cf",
                           "--user_symbols=@-@", *SPECIALS],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "800 pieces, nfkc_cf normalization, unk id 3, eos id 2" in done.stdout
