"""Checks SQL statements with a current ClickHouse parser (chdb-core's `formatQuery`).

Reads a JSON list of statements on stdin; prints a JSON list with, for each, either
{"ok": "<formatted statement>"} or {"error": "<parser message>"}.

With --serve: one JSON string per input line, one JSON result per output line, until stdin closes
(the ClickHouse HTTP stand-in keeps one such process for all its statements).
"""
import json
import sys

import chdb


def literal(s):
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


# One in-memory session for every statement: `chdb.query` starts a new one each time (about 35 ms here,
# against about 1 ms on a kept connection), which made the stand-in the slowest part of a provisioning
# burst.
SESSION = chdb.connect(":memory:")


def parse(statement):
    try:
        formatted = SESSION.query(f"SELECT formatQuery({literal(statement)})", "TSVRaw").bytes().decode()
        return {"ok": formatted.strip()}
    except Exception as e:  # chdb raises its own error type with the server's message
        return {"error": str(e).splitlines()[0]}


def main():
    if sys.argv[1:] == ["--serve"]:
        for line in sys.stdin:
            print(json.dumps(parse(json.loads(line))), flush=True)
        return
    json.dump([parse(s) for s in json.load(sys.stdin)], sys.stdout)


if __name__ == "__main__":
    main()
