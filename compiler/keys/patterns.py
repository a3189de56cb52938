"""What a text setting that reaches a generated script or manifest may be.

`launch.sh`, `slurm.sbatch` and the Kubernetes manifests (`compiler/artefacts/cluster.py`) are built
from settings; a value that is not what its key names (a newline in an address, ``$(id)``
in a namespace) would become a command or a broken manifest. Each such key declares one of
these patterns (``pattern=`` in `compiler/keys/sections/`), which the JSON Schema carries for
editors and `compiler/canonical/normalise.py` applies with ``re.fullmatch`` (a ``$`` alone also
matches before a final newline). Each pattern is anchored with ``^...$`` and written in the
common subset of Python's and ECMAScript's regular expressions (the schema's dialect).
`WHAT` says, for the diagnostic, what the value must be.
"""

from __future__ import annotations

_LABEL = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"

#: An IPv4 address or DNS host name (RFC 1123 labels), or an IPv6 address; empty: unset.
HOST = (f"^$|^(?=.{{1,253}}$){_LABEL}(\\.{_LABEL})*\\.?$"
        "|^(?=.{2,45}$)[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*$")
#: A Slurm job / Kubernetes resource name (a DNS-1123 label short enough for generated suffixes).
JOB_NAME = "^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$"
#: A Kubernetes namespace: a DNS-1123 label.
DNS_LABEL = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
#: A Slurm time limit: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or UNLIMITED.
SLURM_TIME = ("^$|^[0-9]{1,9}(:[0-9]{1,2}){0,2}$|^[0-9]{1,5}-[0-9]{1,2}(:[0-9]{1,2}){0,2}$"
              "|^(UNLIMITED|unlimited|INFINITE|infinite)$")
#: A Slurm partition or account name (or a comma-separated list of partitions).
SLURM_NAME = "^$|^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(,[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}){0,15}$"
#: A container image reference (registry/name:tag or @sha256:digest).
IMAGE = "^$|^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$"

WHAT = {
    JOB_NAME: "lower-case letters, digits and '-', starting and ending with a letter or digit, at most 52 "
              "characters",
    HOST: "an IP address or a host name (letters, digits, '-' and '.')",
    DNS_LABEL: "a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter or "
               "digit, at most 63 characters",
    SLURM_TIME: "a Slurm time: MINUTES, HH:MM:SS, D-HH, D-HH:MM:SS or UNLIMITED",
    SLURM_NAME: "a Slurm name: letters, digits, '_', '.' and '-' (several partitions separated by ',')",
    IMAGE: "a container image reference (letters, digits and . _ / : @ -)",
}
