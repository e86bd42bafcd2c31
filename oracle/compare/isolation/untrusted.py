"""Reading files whose content and kind we do not control: report folders, shard reports, manifests,
known-findings files. Everything in them is data, never a path to follow or a size to believe.

- only regular files are read (a FIFO would block, /dev/zero never ends), opened without following a
  final symlink, and at most `limit` bytes: a larger file is refused before it is read;
- names taken from such data (a journal's staging folder, a manifest's files) must be plain names of
  entries directly inside the folder: no separator, no `..`, not absolute, no NUL;
- every failure is one DataFileError naming the file and what is wrong (the CLI's exit 2).
"""
from __future__ import annotations

import json
import os
import stat

MiB = 1 << 20


class DataFileError(ValueError):
    """A file we were asked to read is not usable (its path and why are in the message)."""


def open_regular(path: str, what: str = "file") -> tuple[int, os.stat_result]:
    """An fd of `path`, a regular file, opened without following a final symlink (and without blocking
    on a FIFO); the caller closes it."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if os.path.islink(path):
            raise DataFileError(f"{path}: the {what} is a symbolic link; refusing to follow it") from None
        raise DataFileError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise DataFileError(f"{path}: the {what} is not a regular file")
    return fd, info


def read_bytes(path: str, limit: int, what: str = "file") -> bytes:
    """The whole content of a regular file of at most `limit` bytes."""
    fd, info = open_regular(path, what)
    try:
        if info.st_size > limit:
            raise DataFileError(f"{path}: the {what} is {info.st_size} bytes, over the {limit}-byte limit")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, MiB))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:  # grew while read
        raise DataFileError(f"{path}: the {what} is over the {limit}-byte limit")
    return data


def read_text(path: str, limit: int, what: str = "file") -> str:
    try:
        return read_bytes(path, limit, what).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataFileError(f"{path}: the {what} is not UTF-8 text (byte {exc.start})") from None


def read_json(path: str, limit: int, what: str = "file"):
    text = read_text(path, limit, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataFileError(f"{path}: the {what} is not JSON ({exc.msg}, line {exc.lineno})") from None
    except RecursionError:
        raise DataFileError(f"{path}: the {what} is nested too deeply to be one of ours") from None


def plain_name(name, where: str, what: str = "name") -> str:
    """`name` if it names an entry directly inside a folder (read from data: never trusted)."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\0" in name \
            or (os.altsep and os.altsep in name):
        raise DataFileError(f"{where}: {what} {name!r} is not a plain file name inside the folder")
    return name


def is_plain_dir(path: str) -> bool:
    """A directory itself, not a symlink to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def is_plain_file(path: str) -> bool:
    """A regular file itself, not a symlink to one."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def expect(cond: bool, path: str, message: str) -> None:
    if not cond:
        raise DataFileError(f"{path}: {message}")
