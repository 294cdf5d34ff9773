"""One vocabulary of GPU model names: canonical names and the aliases each source uses.

Pure (stdlib only). A canonical name is `<FAMILY>-<GB>GB` (`A100-80GB`, `H100-80GB`,
`T4-16GB`), the form the node agent derives from NVML and configurations use. The same GPU is
called `a100_80g` (a Slurm gres type, site-defined), `NVIDIA-A100-SXM4-80GB` (Kubernetes
`nvidia.com/gpu.product`, GPU feature discovery), `NVIDIA A100-SXM4-80GB` (NVML),
`V100M32` (a trace code): `canonical` maps every one of them to one name.

Rules (`canonical(name)`, from the name alone, so every source maps a name alike):

1. the name is compared as a *key*: upper-cased, `_`, spaces and `-` dropped, the words
   `NVIDIA`, `TESLA`, form factors (`SXM4`, `PCIE`, `HBM3`, ...) and a GPU feature discovery
   `-MIG-<profile>` suffix left out (`NVIDIA-A100-SXM4-80GB` -> `A10080GB`);
2. an explicit alias (`ALIASES`: trace codes and names whose size is not in the name, such as
   `H100-NVL` or `V100S`) gives its canonical name;
3. a family with a size in GB (`A100-80GB`, `a100_80g`) gives `<FAMILY>-<GB>GB` when that is a
   known canonical name (`CANONICAL`);
4. a family alone gives its canonical name when the family has one marketed size (`T4` ->
   `T4-16GB`, `l40s` -> `L40S-48GB`); a family with several (`A100`: 40 or 80 GB, `H100`,
   `V100`, `P100`) gives the family name alone (`a100` -> `A100`): the size is not known, and
   the same name from every source still matches. An import mapping's `gpu_models:` entry
   (`{a100: A100-80GB}`) says what a site's name means;
5. anything else is kept verbatim (`Vocabulary` collects them for one warning).

`gpu_memory_mib(name)` is the memory of a canonical name (0 when unknown).
"""

from __future__ import annotations

import re

CANONICAL: dict[str, int] = {
    "A100-40GB": 40960,
    "A100-80GB": 81920,
    "A800-40GB": 40960,
    "A800-80GB": 81920,
    "A10-24GB": 24576,
    "A10G-24GB": 23028,
    "A16-16GB": 16384,
    "A30-24GB": 24576,
    "A40-48GB": 46068,
    "A2-16GB": 16384,
    "A6000-48GB": 49140,
    "B100-192GB": 196608,
    "B200-180GB": 184320,
    "GH200-96GB": 98304,
    "GH200-144GB": 147456,
    "H100-80GB": 81920,
    "H100-94GB": 95830,
    "H100-96GB": 98304,
    "H20-96GB": 98304,
    "H200-141GB": 144384,
    "H800-80GB": 81920,
    "L4-24GB": 23034,
    "L40-48GB": 46080,
    "L40S-48GB": 46080,
    "P100-12GB": 12288,
    "P100-16GB": 16384,
    "P40-24GB": 24576,
    "P4-8GB": 8192,
    "RTX6000-24GB": 24576,
    "T4-16GB": 15360,
    "V100-16GB": 16384,
    "V100-32GB": 32768,
}
"""Canonical names -> GPU memory in MiB (as NVML reports it where known, else GB x 1024)."""

ALIASES: dict[str, str] = {
    # names that state no size but mean one model
    "H100NVL": "H100-94GB",
    "V100S": "V100-32GB",
    "RTXA6000": "A6000-48GB",
    "QUADRORTX6000": "RTX6000-24GB",
    # trace codes (Alibaba cluster traces: openb, PAI)
    "V100M16": "V100-16GB",
    "V100M32": "V100-32GB",
}
"""Explicit aliases by key (`key`); everything else follows the rules of the module doc."""

_DROP_WORDS = ("NVIDIA", "TESLA", "GEFORCE", "QUADRO")
_FORM = re.compile(r"^(SXM\d*|PCIE|HBM\d*E?|NVLINK|MAXQ|MOBILE|LAPTOP|GPU)$")
_SIZE = re.compile(r"^(\d+)G(B)?$")
_MIG_SUFFIX = re.compile(r"[-_ ]MIG[-_ ].*$", re.IGNORECASE)
_SPLIT = re.compile(r"[\s\-_]+")

_BY_FAMILY: dict[str, list[str]] = {}
for _name in CANONICAL:
    _BY_FAMILY.setdefault(_name.rsplit("-", 1)[0], []).append(_name)
FAMILIES: dict[str, tuple[str, ...]] = {f: tuple(sorted(v)) for f, v in sorted(_BY_FAMILY.items())}
"""Family -> its canonical names (`A100` -> (`A100-40GB`, `A100-80GB`))."""


def _words(name: str) -> tuple[str, str | None]:
    """(family, size in GB or None) read from a name: `NVIDIA-A100-SXM4-80GB` -> (A100, 80)."""
    text = _MIG_SUFFIX.sub("", name.strip())
    family: list[str] = []
    size = None
    for word in _SPLIT.split(text.upper()):
        if not word or word in _DROP_WORDS or _FORM.match(word):
            continue
        m = _SIZE.match(word)
        if m:
            size = m.group(1)
            continue
        glued = _glued(word) if not family else None  # A10080GB, V10032G
        if glued is not None:
            family.append(glued[0])
            size = glued[1]
            continue
        family.append(word)
    return "".join(family), size


def _glued(word: str) -> tuple[str, str] | None:
    """A known family with its size glued on (`A10080GB` -> (A100, 80)), else None."""
    for fam in sorted(_BY_FAMILY, key=len, reverse=True):
        if word.startswith(fam):
            m = re.fullmatch(r"(\d+)GB?", word[len(fam) :])
            if m:
                return fam, m.group(1)
    return None


def key(name: str) -> str:
    """The comparison key of a name (upper-case, separators, vendor and form-factor words and
    a `-MIG-...` suffix dropped; the size kept): `nvidia-a100-sxm4-80gb` -> `A10080GB`."""
    family, size = _words(name)
    return family + (f"{size}GB" if size else "")


def canonical(name: str) -> str | None:
    """The canonical name of `name`, the family name for a family of several sizes named
    without one, or None when the name is not known (see the module doc)."""
    if name in CANONICAL:
        return name
    family, size = _words(name)
    alias = ALIASES.get(family + (f"{size}GB" if size else ""))
    if alias is not None:
        return alias
    names = FAMILIES.get(family)
    if names is None:
        return None
    if size is not None:
        full = f"{family}-{size}GB"
        return full if full in CANONICAL else None
    return names[0] if len(names) == 1 else family


def resolve(name: str, aliases: dict[str, str] | None = None) -> str:
    """`name` in the vocabulary: a site alias first (`aliases`, exact or by `key`), then
    `canonical`, else `name` verbatim."""
    if aliases:
        if name in aliases:
            return aliases[name]
        k = key(name)
        for alias, target in aliases.items():
            if key(alias) == k:
                return target
    return canonical(name) or name


def resolve_node(name: str, memory_mib: int = 0, aliases: dict[str, str] | None = None) -> str:
    """A node's GPU model: `resolve`, and a family of several sizes named without one
    (`A100`) resolved by the GPU's memory when that is within 10 % of one size (`A100` with
    81920 MiB -> `A100-80GB`)."""
    found = resolve(name, aliases)
    sizes = FAMILIES.get(found)
    if sizes and found not in CANONICAL and memory_mib > 0:
        close = [n for n in sizes if abs(CANONICAL[n] - memory_mib) <= 0.1 * max(CANONICAL[n], 1)]
        if close:
            return min(close, key=lambda n: (abs(CANONICAL[n] - memory_mib), n))
    return found


def job_models(names: tuple[str, ...], aliases: dict[str, str] | None = None) -> tuple[str, ...]:
    """A job's allowed models: each `resolve`d; a family of several sizes (`A100`) allows the
    family name and each of its canonical names (`A100`, `A100-40GB`, `A100-80GB`), so a job
    asking for `a100` runs on nodes named either way. Sorted, without repeats."""
    out: set[str] = set()
    for name in names:
        found = resolve(name, aliases)
        out.add(found)
        if found not in CANONICAL:
            out.update(FAMILIES.get(found, ()))
    return tuple(sorted(out))


def gpu_memory_mib(name: str) -> int:
    """GPU memory of a model name (through `canonical`); 0 when the size is not known."""
    return CANONICAL.get(canonical(name) or "", 0)


class Vocabulary:
    """Resolves names for one import or file, remembering the names kept verbatim (unknown)
    for one warning."""

    def __init__(self, aliases: dict[str, str] | None = None) -> None:
        self.aliases = dict(aliases or {})
        self.unknown: dict[str, int] = {}
        self._memo: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        found = self._memo.get(name)
        if found is None:
            found = self._memo[name] = resolve(name, self.aliases)
        if found == name and canonical(name) is None and name not in self.aliases.values():
            self.unknown[name] = self.unknown.get(name, 0) + 1
        return found

    def node(self, name: str, memory_mib: int = 0) -> str:
        """A node's GPU model (`resolve_node`), unknown names remembered."""
        self(name)
        return resolve_node(name, memory_mib, self.aliases)

    def job(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """A job's allowed models (`job_models`), unknown names remembered."""
        for n in names:
            self(n)
        return job_models(names, self.aliases)

    def warning(self) -> str | None:
        """One line naming every name kept verbatim, or None."""
        if not self.unknown:
            return None
        names = ", ".join(sorted(self.unknown))
        return (
            f"GPU model names not in the vocabulary, kept verbatim: {names} (map them with "
            "the mapping's gpu_models: {NAME: CANONICAL}, e.g. {a100: A100-80GB})"
        )
