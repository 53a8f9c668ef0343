#!/usr/bin/env python3
"""llama.cpp's own C++ server (embedded in PyPI xllamacpp) on 127.0.0.1, its prompt cache on,
until SIGTERM or SIGINT. Started by scripts/local-model."""
import argparse
import signal
import sys
import threading

import xllamacpp as xlc

ap = argparse.ArgumentParser()
ap.add_argument("--model", required=True)
ap.add_argument("--host", default="127.0.0.1")
ap.add_argument("--port", type=int, default=8080)
ap.add_argument("--ctx-size", type=int, default=4096)
ap.add_argument("--parallel", type=int, default=1)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--alias", default="smollm2-135m-instruct")
a = ap.parse_args()

p = xlc.CommonParams()
p.model.path = a.model
p.model_alias = {a.alias}
p.hostnames = [a.host]
p.port = a.port
p.n_ctx = a.ctx_size
p.n_parallel = a.parallel
p.cpuparams.n_threads = a.threads
p.cpuparams_batch.n_threads = a.threads
p.cache_prompt = True
p.endpoint_slots = True
p.endpoint_metrics = True
p.ui = False
srv = xlc.Server(p)
print("listening on", srv.listening_address, flush=True)
stop = threading.Event()
for s in (signal.SIGTERM, signal.SIGINT):
    signal.signal(s, lambda *_: stop.set())
stop.wait()
print("stopping", flush=True)
del srv
sys.exit(0)
