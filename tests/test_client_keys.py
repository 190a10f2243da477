"""Who may join a server: CURVE client allow-lists (ZAP), and abstract ipc sockets treated as exposed."""

from __future__ import annotations

import logging
import os
import re
import sys
import time
import uuid

import pytest
import zmq
import zmq.auth

from magister.curricula.base import Curriculum
from magister.sync.feed import CurriculumClient, SyncError
from magister.sync.security import (
    ClientAllowList,
    check_bind_address,
    generate_keypair,
    is_exposed,
    load_keypair,
)
from magister.sync.zmq_server import serve
from magister.task_spaces.discrete import Discrete

pytestmark = pytest.mark.timeout(60)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract sockets are Linux's")


class Recorder(Curriculum):
    def __init__(self) -> None:
        super().__init__(Discrete(100), seed=0)
        self.sampled = 0
        self.episodes: list[tuple] = []

    def sample(self, k: int = 1) -> list[int]:
        self.sampled += k
        return [int(t) for t in self.rng.integers(100, size=k)]

    def update_on_episode(self, episode_return, length, task, progress, env_id=None):
        self.episodes.append((task, episode_return))


def _play(client: CurriculumClient, episodes: int = 2) -> None:
    for _ in range(episodes):
        a = client.next_task()
        client.record_episode(a, 1.0, 1, 1.0)


def _client(address: str, server_public: bytes, keys=None, timeout: float = 5.0) -> CurriculumClient:
    mine = {} if keys is None else {"curve_client_keys": (keys.public_key, keys.secret_key)}
    return CurriculumClient(
        address, curve_server_key=server_public, timeout=timeout, close_timeout=0.2, **mine
    )


def _refused(address: str, server_public: bytes, keys=None, match="refused this client's CURVE key") -> None:
    """A client the server does not admit: an error saying why as soon as the handshake fails (the socket's
    monitor reports it), long before its timeout; no task."""
    c = _client(address, server_public, keys, timeout=30.0)
    t0 = time.monotonic()
    try:
        with pytest.raises(SyncError, match=match):
            c.next_task()
    finally:
        c.close()
    assert time.monotonic() - t0 < 15.0  # the refusal, not the timeout


def test_a_wrong_server_key_is_named_at_once():
    server_keys, other = generate_keypair(), generate_keypair()
    with serve(Recorder(), "tcp://127.0.0.1:*", curve_secret_key=server_keys.secret_key) as server:
        _refused(server.address, other.public_key, match="is curve_server_key .* the server's public key")
        assert server.metrics()["sync/envs"] == 0


# -- allow-list ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["list", "str-keys"])
def test_only_listed_client_keys_are_served(form, caplog):
    server_keys, listed, unlisted = generate_keypair(), generate_keypair(), generate_keypair()
    allowed = [listed.public_key] if form == "list" else [listed.public_key.decode()]
    cur = Recorder()
    caplog.set_level(logging.WARNING, logger="magister.sync")
    with serve(cur, "tcp://127.0.0.1:*", curve_secret_key=server_keys.secret_key,
               curve_allowed_clients=allowed) as server:
        _refused(server.address, server_keys.public_key, unlisted)
        _refused(server.address, server_keys.public_key)  # an ephemeral key is not listed either
        assert cur.sampled == 0 and cur.episodes == []  # nothing reached the curriculum
        m = server.metrics()
        assert m["sync/envs"] == 0 and m["sync/clients_refused"] >= 2
        good = _client(server.address, server_keys.public_key, listed)
        _play(good, 3)
        good.close()
        m = server.metrics()
    assert m["sync/envs"] == 1 and m["sync/total/episodes_applied"] == 3
    assert len(cur.episodes) == 3
    refusals = [r for r in caplog.records if "not in curve_allowed_clients" in r.getMessage()]
    assert refusals and unlisted.public_key.decode() in refusals[0].getMessage()
    # a refused client retries its connection: the refusals are rate-limited, not one line each
    assert len(refusals) <= 3
    # pyzmq's authenticator adds no warning of its own and nothing logs a traceback for a refusal
    assert not [r for r in caplog.records if r.name.startswith("zmq") and r.levelno >= logging.WARNING]
    assert not [r for r in caplog.records if r.exc_info]


def test_an_allow_list_that_fails_refuses_the_client_and_says_why(monkeypatch, caplog):
    """Fail closed: an error while deciding refuses the client, is counted and logged with its traceback;
    the authenticator goes on answering."""

    def broken(self, public_key):
        raise OSError("the disk went away")

    monkeypatch.setattr(ClientAllowList, "allows", broken)
    server_keys, listed = generate_keypair(), generate_keypair()
    caplog.set_level(logging.WARNING, logger="magister.sync")
    with serve(Recorder(), "tcp://127.0.0.1:*", curve_secret_key=server_keys.secret_key,
               curve_allowed_clients=[listed.public_key]) as server:
        _refused(server.address, server_keys.public_key, listed)
        _refused(server.address, server_keys.public_key, listed)  # the thread still answers
        m = server.metrics()
    assert m["sync/envs"] == 0 and m["sync/clients_refused"] >= 2
    errors = [r for r in caplog.records if "ZAP handler: unexpected error" in r.getMessage()]
    assert errors and "the disk went away" in caplog.text and errors[0].exc_info is not None


def test_a_directory_of_certificates_is_an_allow_list_and_is_read_again_when_it_changes(tmp_path):
    allowed_dir, client_dir = tmp_path / "allowed", tmp_path / "clients"
    allowed_dir.mkdir()
    client_dir.mkdir()
    server_keys = generate_keypair()
    pub_a, secret_a = zmq.auth.create_certificates(client_dir, "a")
    _, secret_b = zmq.auth.create_certificates(client_dir, "b")
    os.replace(pub_a, allowed_dir / "a.key")  # the server's directory holds a's public certificate only
    a, b = load_keypair(secret_a), load_keypair(secret_b)
    cur = Recorder()
    with serve(cur, "tcp://127.0.0.1:*", curve_secret_key=server_keys.secret_key,
               curve_allowed_clients=allowed_dir) as server:
        _refused(server.address, server_keys.public_key, b)
        assert cur.sampled == 0
        ca = _client(server.address, server_keys.public_key, a)
        _play(ca)
        ca.close()
        # b's public certificate copied in: admitted without restarting the server
        os.replace(client_dir / "b.key", allowed_dir / "b.key")
        cb = _client(server.address, server_keys.public_key, b)
        _play(cb)
        cb.close()
        assert server.metrics()["sync/envs"] == 2
    assert len(cur.episodes) == 4


def test_allow_list_arguments_are_checked(tmp_path):
    keys = generate_keypair()
    with pytest.raises(ValueError, match="needs curve_secret_key"):
        serve(Recorder(), "tcp://127.0.0.1:*", curve_allowed_clients=[keys.public_key])
    with pytest.raises(ValueError, match="40-character"):
        serve(Recorder(), "tcp://127.0.0.1:*", curve_secret_key=keys.secret_key,
              curve_allowed_clients=[b"short"])
    with pytest.raises(ValueError, match="one key"):
        ClientAllowList(keys.public_key)
    with pytest.raises(ValueError, match="one 40-character str"):
        ClientAllowList(keys.public_key.decode())
    with pytest.raises(ValueError, match="not a directory"):
        ClientAllowList(tmp_path / "missing")
    with pytest.raises(TypeError, match="list of CURVE public keys"):
        ClientAllowList(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="only a public key"):
        pub, _ = zmq.auth.create_certificates(tmp_path, "c")
        load_keypair(pub)


def test_exposed_curve_server_without_allow_list_warns_that_any_key_holder_can_join(caplog):
    keys = generate_keypair()
    caplog.set_level(logging.WARNING, logger="magister.sync.security")
    with serve(Recorder(), "tcp://0.0.0.0:*", curve_secret_key=keys.secret_key):
        pass
    assert "any holder of the server's public key can join" in caplog.text
    caplog.clear()
    with serve(Recorder(), "tcp://0.0.0.0:*", curve_secret_key=keys.secret_key,
               curve_allowed_clients=[generate_keypair().public_key]):
        pass
    assert "any holder" not in caplog.text
    caplog.clear()
    with serve(Recorder(), "tcp://127.0.0.1:*", curve_secret_key=keys.secret_key):  # loopback: no warning
        pass
    assert "any holder" not in caplog.text


# -- abstract ipc sockets ------------------------------------------------------------------------------


def test_abstract_ipc_addresses_are_exposed_like_non_loopback_tcp():
    assert is_exposed("ipc://@magister-x") and is_exposed("tcp://0.0.0.0:1") and is_exposed("tcp://*:1")
    assert not is_exposed("ipc:///tmp/x.sock") and not is_exposed("tcp://127.0.0.1:1")
    assert not is_exposed("inproc://x")
    with pytest.raises(ValueError, match="any local user can connect to an abstract socket"):
        check_bind_address("ipc://@magister-x", None, False)
    check_bind_address("ipc://@magister-x", generate_keypair().secret_key, False)  # keys: allowed


@linux_only
def test_abstract_ipc_socket_is_refused_without_keys_and_served_with_them(caplog):
    name = f"ipc://@magister-test-{uuid.uuid4().hex}"
    with pytest.raises(ValueError, match="abstract socket"):
        serve(Recorder(), name)
    caplog.set_level(logging.WARNING, logger="magister.sync.security")
    with serve(Recorder(), name, insecure=True) as server:
        c = CurriculumClient(server.address, timeout=5.0, close_timeout=0.2)
        _play(c)
        c.close()
    assert "WITHOUT encryption" in caplog.text and "abstract socket" in caplog.text
    server_keys, client_keys = generate_keypair(), generate_keypair()
    cur = Recorder()
    with serve(cur, name, curve_secret_key=server_keys.secret_key,
               curve_allowed_clients=[client_keys.public_key]) as server:
        _refused(server.address, server_keys.public_key)
        c = _client(server.address, server_keys.public_key, client_keys)
        _play(c)
        c.close()
    assert len(cur.episodes) == 2


# -- the sync wrappers present the worker's key pair ----------------------------------------------------


def _cartpole(space):
    import gymnasium as gym

    from magister.examples.cartpole import CartPoleTask

    return CartPoleTask(gym.make("CartPole-v1"), space)


def test_a_wrapper_presents_its_key_pair_and_only_a_listed_one_is_served():
    from magister import GymnasiumSyncWrapper
    from magister.curricula import DomainRandomization
    from magister.task_spaces import Box

    space = Box(low=0.01, high=0.2, shape=(1,))
    server_keys, listed, unlisted = generate_keypair(), generate_keypair(), generate_keypair()
    cur = DomainRandomization(space, seed=0)
    with serve(cur, "tcp://127.0.0.1:*", curve_secret_key=server_keys.secret_key,
               curve_allowed_clients=[listed.public_key]) as server:
        bad = GymnasiumSyncWrapper(_cartpole(space), server.address, curve_server_key=server_keys.public_key,
                                   curve_client_keys=unlisted, timeout=30.0)
        named = re.escape(f"refused this client's CURVE key {unlisted.public_key.decode()}")
        with pytest.raises(SyncError, match=named):
            bad.reset(seed=0)
        bad.close()
        assert cur.num_sampled == 0
        good = GymnasiumSyncWrapper(_cartpole(space), server.address, curve_server_key=server_keys.public_key,
                                    curve_client_keys=listed, timeout=5.0)
        _, info = good.reset(seed=0)
        assert space.contains(space.decode(info["task"])) and good.env_id == 0
        good.close()
        assert server.metrics()["sync/envs"] == 1 and cur.num_sampled >= 1


def test_wrapper_key_arguments_are_checked():
    from magister import GymnasiumSyncWrapper
    from magister.task_spaces import Box

    space = Box(low=0.01, high=0.2, shape=(1,))
    keys = generate_keypair()
    with pytest.raises(ValueError, match="needs curve_server_key"):
        GymnasiumSyncWrapper(_cartpole(space), "tcp://127.0.0.1:1", curve_client_keys=keys)
    with pytest.raises(ValueError, match=r"\(public_key, secret_key\) pair"):
        GymnasiumSyncWrapper(_cartpole(space), "tcp://127.0.0.1:1", curve_server_key=keys.public_key,
                             curve_client_keys=keys.secret_key)


def test_a_failed_bind_closes_the_key_checks_and_close_leaves_no_thread():
    """The server thread answers the key checks (ZAP): a bind that fails closes that socket with the others
    (else terminating the context would hang), and close() stops the thread."""
    import threading

    def servers():
        return [t for t in threading.enumerate() if t.name.startswith("magister-server-")]

    keys = generate_keypair()
    before = len(servers())
    with serve(Recorder(), "tcp://127.0.0.1:*", curve_secret_key=keys.secret_key,
               curve_allowed_clients=[generate_keypair().public_key]) as server:
        assert len(servers()) == before + 1
        with pytest.raises(zmq.ZMQError):  # the port is taken
            serve(Recorder(), server.address, curve_secret_key=keys.secret_key,
                  curve_allowed_clients=[generate_keypair().public_key])
        assert len(servers()) == before + 1
    assert len(servers()) == before
