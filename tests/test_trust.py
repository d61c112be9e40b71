"""Tests of the shared checks that cache entries and tool output go through before they are believed."""

from __future__ import annotations

import os

import pytest

from iotable._util.trust import Untrusted, check_owned, digest_file, read_bounded


def test_a_plain_file_of_ours_is_read_and_hashed(tmp_path):
    """A regular file of the current user, writable by it alone, reads back and hashes as its bytes."""
    path = tmp_path / "entry"
    path.write_bytes(b"abc")
    path.chmod(0o644)
    assert read_bounded(path, limit=3) == b"abc"
    assert digest_file(path) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    check_owned(path, directory=False)


def test_a_link_is_refused(tmp_path):
    """A symbolic link to a good file is refused by every check."""
    real = tmp_path / "real"
    real.write_bytes(b"abc")
    link = tmp_path / "link"
    link.symlink_to(real)
    for call in (lambda: read_bounded(link, limit=10), lambda: digest_file(link), lambda: check_owned(link)):
        with pytest.raises(Untrusted, match="symbolic link"):
            call()


def test_a_file_writable_by_others_is_refused(tmp_path):
    """Group or world write permission makes a cache entry untrusted."""
    path = tmp_path / "entry"
    path.write_bytes(b"abc")
    path.chmod(0o666)
    with pytest.raises(Untrusted, match="writable by other users"):
        read_bounded(path, limit=10)
    with pytest.raises(Untrusted, match="writable by other users"):
        check_owned(path)
    assert read_bounded(path, limit=10, owned=False) == b"abc"


def test_a_file_over_the_limit_is_refused_before_reading(tmp_path):
    """A file larger than the limit is refused with its size."""
    path = tmp_path / "big"
    path.write_bytes(b"x" * 100)
    path.chmod(0o600)
    with pytest.raises(Untrusted, match="100 bytes"):
        read_bounded(path, limit=99)


def test_a_folder_is_not_a_file(tmp_path):
    """A folder where a file is expected, and a file where a folder is expected, are refused."""
    folder = tmp_path / "d"
    folder.mkdir(mode=0o755)
    with pytest.raises(Untrusted, match="regular file"):
        read_bounded(folder, limit=10)
    with pytest.raises(Untrusted, match="regular file"):
        check_owned(folder, directory=False)
    check_owned(folder, directory=True)
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(Untrusted, match="not a folder"):
        check_owned(tmp_path / "f", directory=True)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="changing a file's owner needs root")
def test_a_file_of_another_user_is_refused(tmp_path):
    """A file owned by another user is refused (run as root, which can give a file away)."""
    path = tmp_path / "entry"
    path.write_bytes(b"abc")
    path.chmod(0o644)
    os.chown(path, 12345, 12345)
    with pytest.raises(Untrusted, match="owned by user 12345"):
        read_bounded(path, limit=10)
