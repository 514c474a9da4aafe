"""Add one user's permission to a file's POSIX access ACL, as ``setfacl -m u:USER:x`` does,
without needing the ``acl`` package: the ACL is the ``system.posix_acl_access`` extended
attribute, a version word followed by (tag, permissions, id) entries (``linux/posix_acl_xattr.h``).
"""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

XATTR = "system.posix_acl_access"
_VERSION = 2
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_NO_ID = 0xFFFFFFFF
_HEADER = struct.Struct("<I")
_ENTRY = struct.Struct("<HHI")

Entry = tuple[int, int, int]  # (tag, permission bits rwx = 4|2|1, id)


def read_acl(path: Path) -> list[Entry]:
    """The access ACL of ``path``; its mode bits as the three base entries when it has none."""
    try:
        raw = os.getxattr(path, XATTR, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.ENODATA, errno.EOPNOTSUPP):
            raise
        mode = path.lstat().st_mode
        return [
            (USER_OBJ, (mode >> 6) & 7, _NO_ID),
            (GROUP_OBJ, (mode >> 3) & 7, _NO_ID),
            (OTHER, mode & 7, _NO_ID),
        ]
    (version,) = _HEADER.unpack_from(raw)
    if version != _VERSION:
        raise OSError(errno.EINVAL, f"unknown POSIX ACL version {version}", str(path))
    return [_ENTRY.unpack_from(raw, offset) for offset in range(4, len(raw), _ENTRY.size)]


def grant_user(path: Path, uid: int, permissions: int) -> None:
    """Give user ``uid`` (at least) ``permissions`` on ``path``, nobody else anything more.

    The mask entry, which caps every named entry and the owning group, is widened by
    ``permissions`` only; the owning group's own entry is unchanged, so its rights stay as
    they were.

    Raises:
      OSError: the file system takes no ACLs (``EOPNOTSUPP``) or we may not change them.
    """
    entries = [e for e in read_acl(path) if not (e[0] == USER and e[2] == uid)]
    current = next((p for tag, p, i in read_acl(path) if tag == USER and i == uid), 0)
    entries.append((USER, current | permissions, uid))
    masks = [e for e in entries if e[0] == MASK]
    if masks:
        entries = [e for e in entries if e[0] != MASK]
        mask = masks[0][1] | permissions
    else:
        mask = 0
        for tag, perm, _ in entries:
            if tag in (USER, GROUP_OBJ, GROUP):
                mask |= perm
    entries.append((MASK, mask, _NO_ID))
    entries.sort(key=lambda e: (e[0], e[2]))
    blob = _HEADER.pack(_VERSION) + b"".join(_ENTRY.pack(*e) for e in entries)
    os.setxattr(path, XATTR, blob, follow_symlinks=False)


def user_permissions(path: Path, uid: int) -> int | None:
    """The permissions a named entry of ``path``'s ACL gives ``uid``, None without one."""
    return next((p for tag, p, i in read_acl(path) if tag == USER and i == uid), None)
