"""Record each test unit's time from a full run, for the suite's longest-first order.

    python -m pytest --junitxml=run.xml ...   # a full run
    python scripts/record_durations.py run.xml

Writes tests/durations.json: {unit: seconds}, a unit being what one worker runs whole
(tests/conftest.py's `group_of`: a file, or a folder whose files share session runs). Set-up
and teardown are included in a test's time in JUnit XML, so a shared run counts once.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.conftest import group_of  # noqa: E402


def main(xml_path: str) -> None:
    totals: dict[str, float] = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        module = case.get("classname", "")
        # JUnit's classname is the dotted module (plus class); the file is its first part
        # that ends a path under tests/.
        parts = module.split(".")
        for i in range(len(parts), 0, -1):
            path = "/".join(parts[:i]) + ".py"
            if (REPO / path).is_file():
                break
        else:
            continue
        unit = group_of(path)
        totals[unit] = totals.get(unit, 0.0) + float(case.get("time", 0) or 0)
    out = {k: round(v, 1) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}
    (REPO / "tests" / "durations.json").write_text(json.dumps(out, indent=1) + "\n")
    print(f"{len(out)} units, {sum(out.values()) / 60:.1f} min in all; longest: "
          + ", ".join(f"{k} {v:.0f} s" for k, v in list(out.items())[:5]))


if __name__ == "__main__":
    main(sys.argv[1])
