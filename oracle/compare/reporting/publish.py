"""A report folder written as one unit, and a lock so one run at a time writes into it.

A run's files (report.json, report.md, report.html) are published together:

1. each file is written and fsynced into a staging folder inside the report folder
   (`.staging-<run>/`), never beside the published files;
2. a journal (`.pending.json`: the run, each file's SHA-256 and size) is renamed into place: the
   commit point;
3. each file is renamed from the staging folder into the report folder, then `manifest.json` (the
   journal's content) is, and the journal and the staging folder are removed.

A stop before 2 leaves the old report untouched (the staging folder is removed by the next run); a
stop after 2 is completed by the next run into the folder (or `recover`): the journal names every
file and the staging folder still holds the ones not yet moved. So the files beside `manifest.json`
are always one run's, and `verify` says whether they are (a reader can tell a torn or hand-edited
folder from a whole one). SIGINT and SIGTERM are held while publishing and delivered afterwards.

`ReportLock` is an flock(2) on `.oracle-compare.lock` in the folder, held for the whole run (the
kernel drops it when the process ends, however it ends): a second run into the same folder refuses
with the holder's pid, start time and command, or waits for it (`--wait`).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import signal
import threading
import stat
import time

from ..isolation.untrusted import DataFileError, MiB, is_plain_dir, is_plain_file, open_regular, plain_name, read_json

MANIFEST = "manifest.json"
MANIFEST_SCHEMA = "optimizer-oracle-manifest/1"
JOURNAL = ".pending.json"
STAGING = ".staging-"
LOCK = ".oracle-compare.lock"
LEGACY_TMP = ".tmp-"  # report.atomic_write's temporaries
JOURNAL_LIMIT = 4 * MiB  # a journal or manifest: names and digests of a few files


class ReportDirError(RuntimeError):
    """The folder cannot be written or read as one report (a usage error for the CLI)."""


class LockedError(ReportDirError):
    """Another run holds the folder's lock."""


# --- the lock ----------------------------------------------------------------------------------

class ReportLock:
    """Exclusive use of a report folder for one run (flock; released when the process ends)."""

    def __init__(self, folder: str, argv=(), wait: bool = False, on_wait=None):
        self.folder, self.argv, self.wait, self.on_wait = folder, list(argv), wait, on_wait
        self.fd = None

    @property
    def path(self) -> str:
        return os.path.join(self.folder, LOCK)

    def holder(self) -> str:
        try:
            info = read_json(self.path, 64 * 1024, "lock file")
        except DataFileError:
            info = {}
        if not isinstance(info, dict) or not info:
            return "another process"
        return (f"pid {info.get('pid')} on {info.get('host', '?')}, started {info.get('started', '?')}: "
                f"{' '.join(info.get('argv', []))}")

    def acquire(self) -> "ReportLock":
        try:
            os.makedirs(self.folder, exist_ok=True)
            # never through a symlink, never a file linked elsewhere: the lock file is truncated and written
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o666)
        except OSError as exc:
            if os.path.islink(self.path):
                raise ReportDirError(f"cannot use report folder {self.folder}: its lock file {self.path} is a "
                                     f"symbolic link (remove it)") from None
            raise ReportDirError(f"cannot use report folder {self.folder}: {exc.strerror or exc}") from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            os.close(fd)
            raise ReportDirError(f"cannot use report folder {self.folder}: its lock file {self.path} is not a "
                                 f"plain file of its own (a hard link or special file; remove it)")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                os.close(fd)
                raise
            who = self.holder()
            if not self.wait:
                os.close(fd)
                raise LockedError(f"report folder {self.folder} is in use by another run ({who}); wait for it "
                                  f"to finish, pass --wait to queue behind it, or choose another --report-dir")
            if self.on_wait is not None:
                self.on_wait(f"waiting for the run writing into {self.folder} ({who}) ...")
            fcntl.flock(fd, fcntl.LOCK_EX)
        self.fd = fd
        info = {"pid": os.getpid(), "host": os.uname().nodename, "argv": self.argv,
                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        return self

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


# --- writing -----------------------------------------------------------------------------------

def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(path: str, data: bytes) -> None:
    umask = os.umask(0)
    os.umask(umask)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666 & ~umask)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def digest(data: bytes) -> dict:
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


@contextlib.contextmanager
def held_signals(signums=(signal.SIGINT, signal.SIGTERM)):
    """Hold these signals for the block and deliver them after it (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught, saved = [], {}
    for s in signums:
        saved[s] = signal.signal(s, lambda n, _f: caught.append(n))
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
        for n in caught[:1]:
            os.kill(os.getpid(), n)


def publish(folder: str, files: dict, run: str | None = None, meta: dict | None = None) -> dict:
    """Write `files` ({name: str | bytes}) into `folder` as one unit; returns the manifest.

    The caller should hold the folder's ReportLock (the CLI does, for the whole run)."""
    os.makedirs(folder, exist_ok=True)
    recover(folder)
    run = run or f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}"
    blobs = {name: (data.encode() if isinstance(data, str) else bytes(data)) for name, data in files.items()}
    for name in blobs:
        if os.sep in name or name.startswith(".") or name in (MANIFEST, JOURNAL):
            raise ValueError(f"cannot publish a file named {name!r}")
    manifest = {"schema": MANIFEST_SCHEMA, "run": run, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                **(meta or {}), "files": {name: digest(data) for name, data in blobs.items()}}
    staging = os.path.join(folder, STAGING + run)
    with held_signals():
        try:
            os.makedirs(staging)
            for name, data in blobs.items():
                _write(os.path.join(staging, name), data)
            _write(os.path.join(staging, JOURNAL), (json.dumps({**manifest, "staging": os.path.basename(staging)},
                                                               indent=1) + "\n").encode())
            _fsync_dir(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        os.replace(os.path.join(staging, JOURNAL), os.path.join(folder, JOURNAL))  # the commit point
        _fsync_dir(folder)
        roll_forward(folder)
    return manifest


def roll_forward(folder: str) -> bool:
    """Finish a publish whose journal is in place; False when there is none."""
    path = os.path.join(folder, JOURNAL)
    if not os.path.lexists(path):
        return False
    try:
        journal = checked_journal(path, read_json(path, JOURNAL_LIMIT, "report journal"))
    except DataFileError as exc:  # a journal is renamed into place whole: this one is not ours; do not guess
        raise ReportDirError(f"{exc}; remove it to let the folder be written again") from None
    staging = os.path.join(folder, journal["staging"])
    if not is_plain_dir(staging):
        raise ReportDirError(f"{path}: its staging folder {staging} is not a folder inside {folder}; remove the "
                             f"journal to let the folder be written again")
    for name, want in journal["files"].items():
        src, dst = os.path.join(staging, name), os.path.join(folder, name)
        if is_plain_file(src):
            os.replace(src, dst)
        elif file_digest(dst) != want:
            raise ReportDirError(f"{folder}: the interrupted write of run {journal['run']} cannot be completed: "
                                 f"{name} is neither staged nor the published one")
    manifest = {k: v for k, v in journal.items() if k != "staging"}
    _write(os.path.join(staging, MANIFEST), (json.dumps(manifest, indent=1) + "\n").encode())
    os.replace(os.path.join(staging, MANIFEST), os.path.join(folder, MANIFEST))
    _fsync_dir(folder)
    os.unlink(path)
    _fsync_dir(folder)
    shutil.rmtree(staging, ignore_errors=True)
    return True


def _publishable(name, where: str) -> str:
    name = plain_name(name, where, "file")
    if name.startswith(".") or name in (MANIFEST, JOURNAL):
        raise DataFileError(f"{where}: file {name!r} is not one a report publishes")
    return name


def _digest_record(value, where: str) -> dict:
    ok = (isinstance(value, dict) and isinstance(value.get("sha256"), str) and len(value["sha256"]) == 64
          and isinstance(value.get("bytes"), int) and not isinstance(value.get("bytes"), bool) and value["bytes"] >= 0)
    if not ok:
        raise DataFileError(f"{where}: a file's record must be {{sha256: 64 hex, bytes: int >= 0}}")
    return value


def checked_files(doc, where: str) -> dict:
    """A journal's or manifest's `files`, every name a publishable plain name (data is never trusted)."""
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict):
        raise DataFileError(f"{where}: expected an object with `files` {{name: {{sha256, bytes}}}}")
    return {_publishable(name, where): _digest_record(want, where) for name, want in files.items()}


def checked_journal(where: str, journal) -> dict:
    files = checked_files(journal, where)
    staging = plain_name(journal.get("staging"), where, "staging folder")
    if not staging.startswith(STAGING):
        raise DataFileError(f"{where}: staging folder {staging!r} is not one of ours ({STAGING}<run>)")
    return {**journal, "files": files, "staging": staging, "run": str(journal.get("run"))}


def recover(folder: str) -> list[str]:
    """Complete an interrupted publish, remove what a write stopped before its commit point left;
    returns what was done (one line each)."""
    done = []
    if not os.path.isdir(folder):
        return done
    if roll_forward(folder):
        done.append(f"completed an interrupted report write in {folder}")
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if name.startswith(STAGING) and is_plain_dir(path):
            shutil.rmtree(path, ignore_errors=True)
            done.append(f"removed {path} (a report write stopped before it was complete)")
        elif name.startswith(LEGACY_TMP) and is_plain_file(path):
            os.unlink(path)
            done.append(f"removed {path} (a temporary file of a stopped write)")
    return done


# --- reading -----------------------------------------------------------------------------------

def file_digest(path: str) -> dict | None:
    """SHA-256 and size of a regular file (read in pieces, no symlink followed); None when absent or not
    a regular file."""
    if not os.path.lexists(path):
        return None
    try:
        fd, _ = open_regular(path, "report file")
    except DataFileError:
        return None
    h, size = hashlib.sha256(), 0
    with os.fdopen(fd, "rb") as fh:
        for chunk in iter(lambda: fh.read(MiB), b""):
            h.update(chunk)
            size += len(chunk)
    return {"sha256": h.hexdigest(), "bytes": size}


def manifest(folder: str) -> dict | None:
    """The folder's manifest, checked (DataFileError when it is not one of ours); None when absent."""
    path = os.path.join(folder, MANIFEST)
    if not os.path.lexists(path):
        return None
    doc = read_json(path, JOURNAL_LIMIT, "manifest")
    return {**doc, "files": checked_files(doc, path)}


def verify(folder: str) -> list[str]:
    """Problems that make the folder's files not one run's (empty when whole). A folder without a
    manifest (reports from before it existed) has nothing to verify."""
    problems = []
    if os.path.exists(os.path.join(folder, JOURNAL)):
        problems.append(f"{folder}: a report write was interrupted after its commit point; the next run into "
                        f"the folder completes it (or call oracle.compare.reporting.publish.recover)")
    try:
        m = manifest(folder)
    except DataFileError as exc:
        return [*problems, str(exc)]
    if m is None:
        return problems
    for name, want in m.get("files", {}).items():
        got = file_digest(os.path.join(folder, name))
        if got is None:
            problems.append(f"{name} is missing (manifest.json of run {m.get('run')} names it)")
        elif got != want:
            problems.append(f"{name} is not the file run {m.get('run')} wrote (SHA-256 differs from manifest.json)")
    return problems


__all__ = ["LockedError", "MANIFEST", "ReportDirError", "ReportLock", "manifest", "publish", "recover", "verify"]
