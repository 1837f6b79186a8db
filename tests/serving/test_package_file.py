"""serving.packaged.check_package_file names a .keras file cut short as damaged, not as
some other kind of file, before anything is loaded."""

import shutil

import pytest

from tests.helpers import PROJECT_ROOT

PRETRAINED = PROJECT_ROOT / "pretrained" / "wt2_base.keras"


@pytest.mark.parametrize("kept", [0.5, 0.01])
def test_truncated_keras_file_is_called_damaged(tmp_path, kept):
    from serving.packaged import PackageError, check_package_file

    whole = PRETRAINED.read_bytes()
    cut = tmp_path / "cut.keras"
    cut.write_bytes(whole[:int(len(whole) * kept)])
    with pytest.raises(PackageError) as error:
        check_package_file(cut)
    message = str(error.value)
    assert message.startswith(f"--model={cut} is a damaged .keras file (truncated or corrupted: ")
    assert message.endswith("copy it again, or export it again with export.py --format=keras")
    assert "\n" not in message and "not a Keras" not in message
    # The whole file passes, and a file that is no zip at all is still "not a Keras file".
    whole_copy = tmp_path / "whole.keras"
    shutil.copyfile(PRETRAINED, whole_copy)
    check_package_file(whole_copy)
    with pytest.raises(PackageError, match=r"is not a Keras \.keras file: give a file written"):
        check_package_file(PROJECT_ROOT / "README.md")


def test_a_bare_model_of_any_registered_family_is_named_as_an_old_export(tmp_path):
    """A .keras file holding a family's model class alone (an older export.py wrote those,
    without the tokenizer): the family declares its class's registered name."""
    import json
    import zipfile

    from model.families import FAMILIES
    from serving.packaged import PackageError, check_package_file

    names = [n for family in FAMILIES.values() for n in family.keras_model_names]
    assert {"par>TransformerXLLM", "par>ShaRnnLM"} <= set(names)
    for name in names:
        path = tmp_path / f"{name.split('>')[1]}.keras"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("config.json", json.dumps({"registered_name": name}))
            archive.writestr("metadata.json", "{}")
        with pytest.raises(PackageError, match="holds a model without its tokenizer"):
            check_package_file(path)
