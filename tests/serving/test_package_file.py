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
