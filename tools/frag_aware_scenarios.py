"""Writes the conformance scenarios run with ``node_scoring: frag-aware``
(scheduler/conformance/scenarios/hourglass/frag-aware/).

They are copies of the shipped scenarios whose outcome the scheduling rules force (gangs, subgroups,
topology constraints, queue quotas and limits, reclaim, preempt, stale gangs), with ``config.node_scoring``
set: a placement policy may choose other nodes, never break a rule. Scenarios whose expectation is a
placement preference (which of several nodes, binpack or spread) are not copied. The files are data,
checked in; re-run ``python3 tools/frag_aware_scenarios.py`` after the sources change.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

SCENARIOS = Path(__file__).resolve().parent.parent / "scheduler" / "conformance" / "scenarios"
OUT = SCENARIOS / "hourglass" / "frag-aware"
SCORING = "frag-aware"

#: The source folders: the rules whose outcome does not depend on the node scores.
SOURCES = (
    "hourglass/real-nodes/topology",
    "hourglass/real-nodes/subgroups",
    "hourglass/real-nodes/with-eviction",
    "kai/gang",
    "kai/elastic",
    "kai/hierarchy",
    "kai/reclaim",
    "kai/cycles-reclaim",
    "kai/preempt",
    "kai/cycles-preempt",
    "kai/stale-gang-eviction",
)


def frag_aware_copy(doc: dict[str, object]) -> dict[str, object]:
    """The scenario run with ``node_scoring: frag-aware``, named and tagged as such."""
    out = dict(doc)
    out["name"] = f"{SCORING}-{doc['name']}"
    out["intent"] = f"Under node_scoring {SCORING}, the same outcome: {doc.get('intent', '')}".rstrip(": ")
    tags = doc.get("tags", [])
    out["tags"] = [*(tags if isinstance(tags, list) else []), SCORING]
    config = doc.get("config", {})
    out["config"] = {**(config if isinstance(config, dict) else {}), "node_scoring": SCORING}
    return out


def main() -> None:
    """Rewrite OUT from the sources: every scenario that runs actions (not filter or fair-share only)."""
    shutil.rmtree(OUT, ignore_errors=True)
    written = 0
    for source in SOURCES:
        for path in sorted((SCENARIOS / source).glob("*.json")):
            doc = json.loads(path.read_text())
            if doc["run"]["mode"] in ("filter", "fair_share") or "refused" in doc.get("expect", {}):
                continue
            target = OUT / source.replace("/", "-") / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(frag_aware_copy(doc), indent=2) + "\n")
            written += 1
    print(f"wrote {written} scenarios under {OUT}")


if __name__ == "__main__":
    main()
