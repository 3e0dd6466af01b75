"""The testbed's benchmark client sending one released wave: how long its own event loop takes per request.

A check, not part of the package or its tests. It runs the client the testbed used, as is
(``e2e_bench.py`` of magicYang1573/sglang at c82f643ae, ``test/cxl_utils/``: ``run_round`` and
``send_request_streaming``: one asyncio loop, aiohttp, the prompt sent as JSON text to ``/v1/completions``), against
a copy of SGLang's HTTP path on the same host (FastAPI with CORS, ``Depends(validate_json_request)``, a pydantic
``CompletionRequest``, a ``StreamingResponse`` whose generator tokenises: it blocks the loop ``T_TOKEN`` per prompt
token, as the TokenizerManager's tokeniser does; uvicorn with uvloop, as ``http_server.launch_server``). Each
request's clock starts when its task first runs (``st`` in ``send_request_streaming``); the server notes when each
handler returns (the moment uvicorn logs the ``POST`` line, before tokenising). Needs aiohttp, fastapi, uvicorn,
uvloop, httptools and numpy, and the fork's file::

    mkdir -p /tmp/fork/test/cxl_utils     # the file looks two folders up for the fork's python/
    git -C <fork mirror> show c82f643ae:test/cxl_utils/e2e_bench.py > /tmp/fork/test/cxl_utils/e2e_bench.py
    python benchmarks/client_loop.py /tmp/fork/test/cxl_utils/e2e_bench.py --reps 3

Prints, per (prompt tokens, requests released at once): the spacing of the requests' clocks (ms per request, the
slope over the wave), the whole pass (s), the first handler's return after the first clock (s). Results and what
the model does with them: benchmarks/client_loop.md.
"""

import argparse
import asyncio
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time

FILLER = ("The quick brown fox jumps over the lazy dog. "            # the testbed's synthetic prompt
          "Lorem ipsum dolor sit amet, consectetur adipiscing elit. "
          "Sed do eiusmod tempor incididunt ut labore et dolore magna aliqua. ")
BYTES_PER_TOKEN = 4.3            # about 4.3 characters per token of this filler (assumed, not tokenised here)
CASES = [(1024, 128), (4096, 192), (8192, 128), (16384, 128), (32768, 8), (32768, 16), (32768, 64),
         (32768, 128), (32768, 160), (32768, 192), (65536, 64), (131072, 64)]


def serve(port: int, log: str, t_token: float) -> None:
    """SGLang's /v1/completions path, as far as the request's body and its tokenisation."""
    from typing import List, Union

    import uvicorn
    from fastapi import Depends, FastAPI, Request
    from fastapi.middleware.cors import CORSMiddleware
    from fastapi.responses import StreamingResponse
    from pydantic import BaseModel

    out = open(log, "a", buffering=1)
    app = FastAPI()
    app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_credentials=True, allow_methods=["*"],
                       allow_headers=["*"])

    class CompletionRequest(BaseModel):
        model: str
        prompt: Union[List[int], List[List[int]], str, List[str]]
        max_tokens: int = 16
        temperature: float = 1.0
        stream: bool = False
        ignore_eos: bool = False

    async def validate_json_request(raw_request: Request):
        assert raw_request.headers.get("content-type", "").split(";")[0] == "application/json"

    @app.post("/v1/completions", dependencies=[Depends(validate_json_request)])
    async def completions(request: CompletionRequest, raw_request: Request):
        out.write(f"{time.perf_counter():.6f}\n")
        tokens = len(request.prompt) / BYTES_PER_TOKEN

        async def gen():
            time.sleep(t_token * tokens)          # the tokeniser blocks the event loop
            yield "data: " + json.dumps({"choices": [{"text": "x"}]}) + "\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(gen(), media_type="text/event-stream")

    uvicorn.run(app, host="127.0.0.1", port=port, loop="uvloop", log_level="warning")


def one_wave(eb, port: int, tokens: int, n: int, log: str) -> dict:
    """``n`` requests of ``tokens`` released at once (max_concurrency ``n``): the client's clocks and the
    server's handler times, both on the host's monotonic clock."""
    import numpy as np
    text = (FILLER * (int(tokens * BYTES_PER_TOKEN) // len(FILLER) + 1))[:int(tokens * BYTES_PER_TOKEN)]
    open(log, "w").close()
    starts, original = [], eb.send_request_streaming

    async def timed(*a, **k):
        starts.append(time.perf_counter())
        return await original(*a, **k)
    eb.send_request_streaming = timed
    try:
        asyncio.run(eb.run_round(f"http://127.0.0.1:{port}", [(text, tokens, 1)] * n, "m", 0.0, n))
    finally:
        eb.send_request_streaming = original
    st = np.sort(starts) - min(starts)
    handlers = sorted(float(x) for x in open(log)) if os.path.getsize(log) else [float("nan")]
    return {"tokens": tokens, "requests": n, "step_ms": float(np.polyfit(np.arange(1, n), st[1:], 1)[0] * 1e3),
            "pass_s": float(st[-1]), "first_handler_s": handlers[0] - min(starts)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("e2e_bench", help="the fork's test/cxl_utils/e2e_bench.py")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--t-token", type=float, default=0.552e-6, help="server tokenisation s per token")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--log", default="/tmp/client_loop_handlers.log")
    a = ap.parse_args()
    if a.serve:
        serve(a.serve, a.log, a.t_token)
        return
    spec = importlib.util.spec_from_file_location("e2e_bench", a.e2e_bench)
    eb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(eb)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = subprocess.Popen([sys.executable, __file__, a.e2e_bench, "--serve", str(port), "--log", a.log,
                            "--t-token", str(a.t_token)])
    try:
        time.sleep(3)
        for rep in range(a.reps):
            for tokens, n in CASES:
                print(json.dumps({"rep": rep, **one_wave(eb, port, tokens, n, a.log)}), flush=True)
    finally:
        srv.terminate()


if __name__ == "__main__":
    main()
