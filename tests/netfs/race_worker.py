"""One "host" of the model race: ``python -m tests.netfs.race_worker URL NAME``.

For every line ``N`` on stdin it registers the model ``model-NAME`` on endpoint ``race.models.rN``
and answers ``won N`` or ``lost N`` (a ConflictError: another host's model is there).
"""

from __future__ import annotations

import sys

import discovery_sync as ds


def main() -> None:
    url, name = sys.argv[1], sys.argv[2]
    with ds.connect(url) as client:
        print("ready", flush=True)
        for line in sys.stdin:
            round_number = line.strip()
            spec = ds.ModelSpec("race", "models", f"r{round_number}", {"display_name": f"model-{name}"})
            try:
                client.register(spec)
                print(f"won {round_number}", flush=True)
            except ds.ConflictError:
                print(f"lost {round_number}", flush=True)


if __name__ == "__main__":
    main()
