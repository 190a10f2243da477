"""RLlib on a multi-node Ray cluster simulated on one machine (``ray.cluster_utils.Cluster``): a node with
env runners is removed mid-run, RLlib replaces its runners, and every task the curriculum handed out is
accounted for.

This module runs its own cluster: it shuts down the shared local Ray session first (the next Ray module
starts a fresh one) and its cluster when it ends.
"""

from __future__ import annotations

import sys

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.rllib")

from ray.cluster_utils import Cluster  # noqa: E402

from magister.curricula.expanding_box import ExpandingBox  # noqa: E402
from magister.examples.cartpole import default_task_space  # noqa: E402
from magister.examples.rllib_cartpole import build_config  # noqa: E402
from magister.sync.ray_server import serve_ray  # noqa: E402

pytestmark = [pytest.mark.timeout(300)]

MB = 1024 * 1024


@pytest.fixture(scope="module")
def cluster():
    """A head (the learner and the curriculum actor) and two worker nodes with one env runner slot each."""
    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"head": 1}, "object_store_memory": 100 * MB, "include_dashboard": False,
    })
    for _ in range(2):
        c.add_node(num_cpus=1, resources={"runner": 1}, object_store_memory=80 * MB)
    c.wait_for_nodes()
    ray.init(address=c.address, namespace="magister_cluster_test", configure_logging=False,
             log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield c
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    ray.shutdown()
    c.shutdown()


class AbandonRecorder(ExpandingBox):
    """The example's ExpandingBox, recording each task passed to ``on_task_abandoned`` (with its env)."""

    def __init__(self) -> None:
        super().__init__(default_task_space(0), start_low=0.0, start_high=0.05, duration=10_000, unit="steps")
        self.abandoned: list[tuple] = []

    def on_task_abandoned(self, task, env_id=None):
        self.abandoned.append((tuple(float(x) for x in task), env_id))

    def records(self):
        return self.abandoned


def runner_nodes(algo) -> dict[int, str]:
    """The node id of each healthy remote env runner, by runner id."""
    group = algo.env_runner_group
    ids = group.healthy_worker_ids()
    nodes = group.foreach_env_runner(lambda r: ray.get_runtime_context().get_node_id(),
                                     local_env_runner=False, remote_worker_ids=ids)
    return dict(zip(ids, nodes))


@pytest.mark.slow
def test_rllib_survives_a_node_loss_and_every_lease_is_accounted(cluster):
    server = serve_ray(AbandonRecorder(), name="magister_cluster_curriculum",
                       actor_options={"resources": {"head": 1}})
    config = build_config(server.address, num_env_runners=2, envs_per_runner=1, batch_size=64,
                          minibatch_size=64, num_epochs=1)
    config.env_runners(num_cpus_per_env_runner=1, custom_resources_per_env_runner={"runner": 1})
    assert config.restart_failed_env_runners  # RLlib's default: failed runners are restarted
    algo = config.build_algo()
    try:
        algo.train()
        nodes = runner_nodes(algo)
        assert len(set(nodes.values())) == 2  # one runner on each worker node
        before = server.metrics()
        assert before["sync/envs_live"] == 2 and before["sync/total/episodes_applied"] > 0
        victim = next(n for n in cluster.worker_nodes if n.node_id == nodes[min(nodes)])
        cluster.remove_node(victim)  # the node and the runner on it die mid-run
        cluster.add_node(num_cpus=1, resources={"runner": 1}, object_store_memory=80 * MB)  # its replacement
        for _ in range(30):  # train on; RLlib restarts the lost runner on the new node
            algo.train()
            if len(runner_nodes(algo)) == 2:
                break
        after = runner_nodes(algo)
        assert len(after) == 2 and victim.node_id not in after.values()
        for _ in range(30):  # train until the loss is declared and both live envs have reported since
            algo.train()
            m = server.metrics()
            live = [e for e in (0, 1) if m[f"sync/env{e}/connected"] == 1]
            if len(live) == 1 and m.get("sync/env2/episodes_applied", 0) > 0 and (
                    m[f"sync/env{live[0]}/episodes_applied"] > before[f"sync/env{live[0]}/episodes_applied"]):
                break
    finally:
        algo.stop()  # the live runners close their envs: their unused tasks are returned
    final = server.metrics()
    abandoned = server.call("records")
    server.close()
    # the env of the lost runner was declared dead through Ray (not silence), holding tasks: abandoned
    gone = [e for e in (0, 1) if m[f"sync/env{e}/connected"] == 0]
    assert len(gone) == 1, f"the env of the lost runner was not declared gone (envs gone: {gone})"
    dead = gone[0]
    assert m["sync/envs_dead"] == 1 and m["sync/envs_timed_out"] == 0
    assert m[f"sync/env{dead}/tasks_abandoned"] >= 1 and m[f"sync/env{dead}/tasks_in_flight"] == 0
    assert sum(e == dead for _, e in abandoned) == m[f"sync/env{dead}/tasks_abandoned"]
    # the replacement runner's env registered and trained with the curriculum; so did the surviving one
    assert m["sync/envs"] == 3 and m["sync/env2/episodes_applied"] > 0
    assert m[f"sync/env{1 - dead}/episodes_applied"] > before[f"sync/env{1 - dead}/episodes_applied"]
    # every lease accounted: sent = consumed + returned + abandoned, nothing left in flight
    t = {k.split("/")[-1]: v for k, v in final.items() if k.startswith("sync/total/")}
    assert t["tasks_sent"] == t["tasks_consumed"] + t["tasks_returned"] + t["tasks_abandoned"]
    assert t["tasks_in_flight"] == 0 and final["sync/envs_live"] == 0
    # on_task_abandoned once per abandoned task
    assert len(abandoned) == t["tasks_abandoned"] and len(set(abandoned)) == len(abandoned)
