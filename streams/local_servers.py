"""What starting a model server process on this host needs, whichever server it is (vLLM, or the project's lighter
``transformers serve`` of one model): a free port and an offline environment (plain Python, no ORM).

Both the runtime's launches (:mod:`streams.serve_profiles`, :mod:`streams.vllm_cpu`) and training's own local
server (:mod:`training_jobs.tiny_model.serve`) use these, so they live in the lower layer.
"""

from __future__ import annotations

import os
import socket

DEFAULT_HOST = "127.0.0.1"


def free_port(host: str = DEFAULT_HOST) -> int:
    """A TCP port nothing listens on at ``host`` now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def local_server_env(threads: int = 2) -> dict[str, str]:
    """The environment of the local ``transformers serve`` server: offline (no hub, no downloads), ``threads``
    OpenMP threads."""
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"})
    return env
