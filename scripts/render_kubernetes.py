#!/usr/bin/env python3
"""Render deploy/helm/strongroom into the plain manifests deploy/kubernetes/strongroom.yaml.

Uses Helm's own template engine (Helm v4's Go SDK, from the ``helm-python-sdk`` wheel: no helm
binary needed, nothing fetched). ``--check`` exits 1 when the committed file is stale (CI).

    python scripts/render_kubernetes.py            # rewrite deploy/kubernetes/strongroom.yaml
    python scripts/render_kubernetes.py --check    # compare only
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "deploy" / "helm" / "strongroom"
OUTPUT = REPO / "deploy" / "kubernetes" / "strongroom.yaml"
RELEASE = "strongroom"
NAMESPACE = "strongroom"
# Helm's install order for the kinds this chart has, so `kubectl apply -f` creates dependencies first.
_ORDER = [
    "ServiceAccount",
    "Secret",
    "ConfigMap",
    "Service",
    "NetworkPolicy",
    "PodDisruptionBudget",
    "StatefulSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "Ingress",
]


def render(values: dict[str, Any] | None = None) -> list[str]:
    """Every rendered document, in install order (each a YAML text without ``---``)."""
    import helm_python
    import yaml

    chart = helm_python.Chart.load(CHART)
    rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    docs: list[tuple[int, str, str]] = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in text.split("\n---"):
            body = doc.strip().removeprefix("---").strip()
            if not body or all(line.lstrip().startswith("#") for line in body.splitlines()):
                continue
            kind = yaml.safe_load(body)["kind"]
            docs.append((_ORDER.index(kind), path, body))
    return [body for _, _, body in sorted(docs, key=lambda d: (d[0], d[1]))]


def manifest_text() -> str:
    header = (
        "# Rendered from deploy/helm/strongroom by scripts/render_kubernetes.py with the chart's default\n"
        '# values (release and namespace "strongroom"). Do not edit: change the chart and re-render.\n'
        "# The Secrets strongroom-gateway and strongroom-engine are created apart (scripts/k8s_secrets.py).\n"
    )
    return header + "".join(f"---\n{doc}\n" for doc in render())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed manifests are stale")
    args = parser.parse_args()
    text = manifest_text()
    if args.check:
        if OUTPUT.read_text(encoding="utf-8") != text:
            print(
                f"{OUTPUT.relative_to(REPO)} is stale: run python scripts/render_kubernetes.py",
                file=sys.stderr,
            )
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
