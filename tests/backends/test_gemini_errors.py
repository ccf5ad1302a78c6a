"""HTTP failures the SDK lets through are translated; an auth error on listing is never hidden
(real google-genai client against the emulator)."""

from __future__ import annotations

import pytest

from nightshift.errors import PermanentBackendError, TransientBackendError
from tests.backends.test_gemini_backend import make_backend, make_spec


def test_an_answer_that_cannot_be_decoded_is_transient(emu, tmp_path) -> None:
    backend = make_backend(emu)
    batch_id = backend.submit(make_spec(tmp_path, "garbled", 1))
    emu.inject_faults("garbled", endpoint="batches.get")
    with pytest.raises(TransientBackendError, match="DecodingError"):
        backend.status(batch_id)


def test_a_redirect_loop_is_permanent(emu, tmp_path) -> None:
    backend = make_backend(emu)
    batch_id = backend.submit(make_spec(tmp_path, "loop", 1))
    emu.inject_faults("redirect", endpoint="batches.get", times=50)
    with pytest.raises(PermanentBackendError, match="TooManyRedirects"):
        backend.status(batch_id)


def test_a_401_on_listing_is_every_unlisted_id_s_error_without_asking_each(emu, tmp_path) -> None:
    ids = [make_backend(emu).submit(make_spec(tmp_path, f"j{i}", 1)) for i in range(3)]
    emu.calls.clear()
    emu.counts.clear()
    values = make_backend(emu, key="a-revoked-key").status_many(ids)
    assert set(values) == set(ids)
    for value in values.values():
        assert isinstance(value, PermanentBackendError) and "401" in str(value)
    assert emu.count("batches.list") == 1 and emu.count("batches.get") == 0


def test_a_403_on_listing_is_not_hidden_behind_single_gets(emu, tmp_path) -> None:
    backend = make_backend(emu)
    ids = [backend.submit(make_spec(tmp_path, f"j{i}", 1)) for i in range(2)]
    emu.inject_errors([403], endpoint="batches.list", message="listing not permitted")
    values = backend.status_many(ids)
    for value in values.values():
        assert isinstance(value, PermanentBackendError) and "403" in str(value)
    assert emu.count("batches.get") == 0


def test_another_permanent_listing_error_leaves_every_id_to_a_single_get(emu, tmp_path) -> None:
    backend = make_backend(emu)
    ids = [backend.submit(make_spec(tmp_path, f"j{i}", 1)) for i in range(2)]
    emu.inject_errors([400], endpoint="batches.list", message="bad page token")
    assert backend.status_many(ids) == {}  # the watcher asks each on a call of its own
    assert emu.count("batches.get") == 0
    assert all(backend.status(i).state.final for i in ids)


def test_an_empty_question_costs_no_call(emu) -> None:
    assert make_backend(emu).status_many([]) == {}
    assert emu.count() == 0
