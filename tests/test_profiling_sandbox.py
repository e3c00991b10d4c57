"""The profile capture's sandbox edges: files a sandboxed child could redirect, and a sandbox
that cannot be entered (a failure becomes ProfileError, which ncu's capture turns into a
note, never an escaped exception)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fitness.profiling import ProfileError, _ncu_capture, _read_own, _write_own


def test_a_link_left_in_the_profile_folder_does_not_redirect_the_parents_write(tmp_path):
    victim = tmp_path / "root_only.txt"
    victim.write_text("keep me")
    folder = tmp_path / "profile"
    folder.mkdir()
    (folder / "job_ncu.json").symlink_to(victim)
    _write_own(folder / "job_ncu.json", '{"mode": "ncu"}')
    assert victim.read_text() == "keep me"
    assert not (folder / "job_ncu.json").is_symlink()
    assert (folder / "job_ncu.json").read_text() == '{"mode": "ncu"}'


def test_the_parent_refuses_to_read_a_link_as_the_childs_output(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("root's")
    (tmp_path / "profile_out.json").symlink_to(secret)
    with pytest.raises(ProfileError, match="cannot read profile_out.json"):
        _read_own(tmp_path / "profile_out.json")
    (tmp_path / "plain.json").write_text("{}")
    assert _read_own(tmp_path / "plain.json") == "{}"


@pytest.mark.skipif(os.geteuid() != 0, reason="ncu runs sandboxed only under a root caller")
def test_a_sandbox_that_cannot_be_entered_is_a_note_not_an_escape(tmp_path, monkeypatch):
    import fitness.isolation

    def refuse(*_):  # as chown on a read-only mount would, inside ncu's preexec
        raise PermissionError("read-only file system")

    monkeypatch.setattr(fitness.isolation, "_chown_tree", refuse)
    job = {"mode": "torch", "run_as": "nobody", "env": {}}
    kernels, notes = _ncu_capture("/bin/true", job, str(tmp_path), [], 1, 30)
    assert kernels == []
    assert any("could not start the profiling child" in n for n in notes), notes
    assert Path(tmp_path, "job_ncu.json").exists()
