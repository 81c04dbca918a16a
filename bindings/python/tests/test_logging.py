"""nexar's log lines reach logging.getLogger("nexar"), from the dispatch
thread, never from nexar's own threads."""
import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import json, logging, threading
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append((record.levelname, record.getMessage(), record.threadName))

    logging.getLogger("nexar").addHandler(Keep())
    logging.getLogger("nexar").setLevel(logging.DEBUG)
    import nexar
    comms = nexar.bootstrap_local(2)
    comms[1].close()          # rank 0's I/O thread logs that rank 1 left
    for _ in range(500):
        nexar._nexar._flush(5)
        if any("rank 1 left" in m or "lost rank 1" in m for _, m, _ in records):
            break
        threading.Event().wait(0.01)
    comms[0].close()
    nexar._nexar._flush(5)
    print(json.dumps(records))
''')


def test_log_lines_reach_python_logging():
    env = dict(os.environ, NEXAR_LOG_LEVEL="info")
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    records = json.loads(r.stdout.strip().splitlines()[-1])
    formed = [x for x in records if "local world of 2 ranks formed" in x[1]]
    assert formed and formed[0][0] == "INFO", records
    left = [x for x in records if "rank 1 left" in x[1] or "lost rank 1" in x[1]]
    assert left, records
    assert {t for _, _, t in records} == {"nexar-dispatch"}, records
    # nothing went to stderr instead
    assert "ranks formed" not in r.stderr, r.stderr
