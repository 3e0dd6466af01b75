"""Every reader of measured data through the reading layer: a FIFO, /dev/zero or a dangling link as a trace,
run JSON, micro-benchmark or server log is refused by name (before: a FIFO blocked forever, /dev/zero was read
until memory ran out); a corrupt or truncated .log.gz, NaN or absurd fields in a log are one-line errors."""
import gzip
import json
import os
import subprocess
import sys
import textwrap

import pytest

from sacmodel.data.records import DataError
from sacmodel.data.server_logs import load_server_log


def bounded(code: str, seconds: float = 90, memory: int = 2 << 30) -> subprocess.CompletedProcess:
    """Run ``code`` in a child Python with an address-space limit and a timeout: a reader that blocks on a FIFO
    or reads /dev/zero for ever fails the test instead of taking the machine."""
    def limit():
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=seconds, preexec_fn=limit, env=env)


def test_special_files_are_refused_by_every_data_reader(tmp_path):
    fifo = tmp_path / "fifo_cxl2.json"
    os.mkfifo(fifo)
    for name in ("fifo.jsonl", "fifo.log.gz", "sparse_kv_bench_fifo.json"):
        os.mkfifo(tmp_path / name)
    (tmp_path / "zero_cxl2.json").symlink_to("/dev/zero")
    (tmp_path / "zero.jsonl").symlink_to("/dev/zero")
    (tmp_path / "dangling.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    r = bounded(f"""
        from pathlib import Path
        from sacmodel.data.records import DataError
        from sacmodel.data.runs import load_run
        from sacmodel.data.traces import load_trace
        from sacmodel.data.server_logs import load_server_log
        from sacmodel.data.microbench import load_microbench
        d = Path({str(tmp_path)!r})
        for fn, name in ((load_run, "fifo_cxl2.json"), (load_run, "zero_cxl2.json"), (load_trace, "fifo.jsonl"),
                         (load_trace, "zero.jsonl"), (load_trace, "dangling.jsonl"),
                         (load_server_log, "fifo.log.gz"), (load_server_log, "/dev/zero"),
                         (lambda p: load_microbench([p]), "sparse_kv_bench_fifo.json")):
            try:
                fn(d / name)
                print("READ", name)
            except DataError as exc:
                print(exc)
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert len(lines) == 8 and not any(x.startswith("READ") for x in lines), lines
    assert "fifo_cxl2.json: is a FIFO (named pipe), not a JSON file" in lines[0]
    assert "zero_cxl2.json: is a character device" in lines[1]
    assert "fifo.jsonl: is a FIFO (named pipe), not a trace file" in lines[2]
    assert "zero.jsonl: is a character device" in lines[3]
    assert "dangling.jsonl: a dangling symbolic link (to " in lines[4] and "nowhere.jsonl" in lines[4]
    assert "fifo.log.gz: is a FIFO" in lines[5] and "/dev/zero: is a character device" in lines[6]
    assert "sparse_kv_bench_fifo.json: is a FIFO" in lines[7]


LOG = ("[2026-04-21 19:51:05] server_args=ServerArgs(dp_size=2, max_total_tokens=200000)\n"
       "[2026-04-21 19:51:06 DP0 TP0] Decode batch, #running-req: 2, #token: 4096, token usage: 0.1, "
       "gen throughput (token/s): 40.0, #queue-req: 0\n"
       "[2026-04-21 19:51:07 DP0 TP0] Decode batch, #running-req: 2, #token: 4160, token usage: 0.1, "
       "gen throughput (token/s): 40.0, #queue-req: 0\n")


def test_corrupt_and_truncated_gzip_logs_are_one_line_errors(tmp_path):
    data = gzip.compress(LOG.encode() * 200)
    p = tmp_path / "server.log.gz"
    p.write_bytes(data[:len(data) // 2])
    with pytest.raises(DataError, match="server.log.gz: truncated gzip data"):
        load_server_log(p)
    p.write_bytes(data[:30] + bytes(b ^ 0x5A for b in data[30:60]) + data[60:])
    with pytest.raises(DataError, match="server.log.gz: corrupt gzip data"):        # was zlib.error
        load_server_log(p)
    p.write_bytes(gzip.compress(LOG.encode()))
    assert len(load_server_log(p).decode) == 2


@pytest.mark.parametrize("bad,msg", [
    ("#running-req: 2,", "#running-req: nan,"),                   # NaN was taken for a count
    ("#token: 4096,", "#token: inf,"),
    ("DP0 TP0] Decode", "DP99999999999999999999999 TP0] Decode"),  # overflowed the rank column
    ("2026-04-21 19:51:06", "2026-13-45 19:51:06"),                  # strptime's ValueError named no file
], ids=["nan", "inf", "rank", "date"])
def test_absurd_log_fields_are_named(tmp_path, bad, msg):
    p = tmp_path / "s.log"
    p.write_text(LOG.replace(bad, msg, 1))
    with pytest.raises(DataError, match=r"s.log: line 2: "):
        load_server_log(p)


def test_huge_log_lines_and_deep_settings(tmp_path):
    p = tmp_path / "s.log"
    p.write_text(LOG + "x" * ((1 << 20) + 5) + "\n")
    with pytest.raises(DataError, match=r"s.log:4: line longer than 1,048,576 bytes"):
        load_server_log(p)
    # a settings value that looks like JSON nested 100,000 deep is kept as text (was a RecursionError)
    p.write_text("[2026-04-21 19:51:05] server_args=ServerArgs(x='" + "[" * 100_000 + "')\n" + LOG)
    assert load_server_log(p).settings["x"].startswith("[[[")


def test_a_run_file_with_infinity_or_a_negative_count_is_refused(tmp_path):
    from sacmodel.data.runs import load_run
    run = {"config": {"target_input_tokens": 8192, "max_concurrency": 4, "output_tokens": 32},
           "round2": {"metrics": {"num_requests": 8, "num_success": 8},
                      "per_request": [{"output_len": 32, "prompt_len": 8192}]}}
    p = tmp_path / "r_cxl2.json"
    p.write_text(json.dumps(run).replace('"prompt_len": 8192', '"prompt_len": -5'))
    with pytest.raises(DataError, match=r"r_cxl2.json: round2.per_request\[0\].prompt_len"):
        load_run(p)
    p.write_text(json.dumps(run).replace("8192,", "Infinity,", 1))
    with pytest.raises(DataError, match="r_cxl2.json: not valid JSON .Infinity"):
        load_run(p)


@pytest.mark.parametrize("name,text", [
    ("span.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
                   '{"timestamp": 1000000000000001.0, "input_length": 5, "output_length": 1}\n'),
    ("span.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 00:00:00.0,5,1\n9000-01-01 00:00:00.0,5,1\n"),
])
def test_a_trace_spanning_more_than_32_years_is_refused_by_line(tmp_path, name, text):
    # (found by the long fuzz run: a 10^15 ms timestamp gave a 'successful' trace of 10^12 s)
    from sacmodel.data.traces import load_trace
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(DataError, match=rf"{name}:\d: .*a trace spans at most 1e\+09 s"):
        load_trace(p)


def test_a_measured_run_the_model_refuses_is_named_by_its_file(tmp_path, capsys):
    # (found by the long fuzz run: 8192 + 155649 tokens beyond the model's positions gave an error naming no file)
    from sacmodel.cli import main
    run = {"completed": 8, "num_prompts": 8, "max_concurrency": 4, "random_input_len": 8192,
           "random_output_len": 155649, "mean_ttft_ms": 500.0, "mean_tpot_ms": 40.0, "output_throughput": 90.0,
           "mean_e2e_latency_ms": 1800.0}
    p = tmp_path / "long_cxl2_ctx8k.json"
    p.write_text(json.dumps(run))
    assert main(["validate", str(p), "--round", "1", "--json"]) == 2
    err = capsys.readouterr().err
    assert "long_cxl2_ctx8k.json: context 8192 + output 155649 exceeds" in err and len(err.splitlines()) == 1
