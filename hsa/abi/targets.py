"""AMD GPU targets: the registry of processors we know, target ids, and their compatibility.

Facts (LLVM AMDGPUUsage, checked against the clang 22 of the `ziglang` wheel on 2026-11-30):
EF_AMDGPU_MACH values are what clang writes into e_flags for `-mcpu=<name>`; LDS sizes are the
limits clang reports ("local memory (N) exceeds limit (M)"). gfx1250 code objects carry the
"any" xnack/sramecc bits in e_flags, but clang rejects those features in a gfx1250 target id,
so gfx1250 offers no target-id features here.

A target id is `name[:sramecc±][:xnack±]`; a feature left out means "any". A code object
built for "any" runs on either agent setting; one built "on" or "off" needs the agent to match.
"""

from __future__ import annotations

from dataclasses import dataclass

from ground.errors import CodeObjectError

__all__ = [
    "Target",
    "TargetId",
    "TARGETS",
    "FEATURE_SETTINGS",
    "lookup",
    "known_names",
    "is_compatible",
    "compatibility_score",
]

#: Values a target-id feature can take.
FEATURE_SETTINGS = ("any", "on", "off")


@dataclass(frozen=True)
class Target:
    """One processor (or generic processor family) and the facts the driver needs about it."""

    name: str  # "gfx1100"
    family: str  # ISA encoding family: "gfx9" | "gfx10" | "gfx11" | "gfx12"
    wave_size: int  # default wavefront size (gfx11/gfx12 also run wave64 code)
    mach: int  # EF_AMDGPU_MACH, e_flags & 0xff
    lds_size: int  # bytes of LDS (group segment) one workgroup may use
    supports_xnack: bool  # may a target id name xnack?
    supports_sramecc: bool  # may a target id name sramecc?
    aliases: tuple[str, ...] = ()
    architecture: str = ""  # "CDNA3", "RDNA3", ...
    generic: str | None = None  # the generic target whose code objects run here
    members: tuple[str, ...] = ()  # for a generic target: the processors it covers
    # GB_ADDR_CONFIG as the amdgpu kernel driver reports it (KFD's GET_TILE_CONFIG, DRM's
    # READ_MMR_REG): pipes, banks, shader engines and pipe interleave, which tiled image
    # layouts depend on; None where the project has not pinned a real part's value
    gb_addr_config: int | None = None

    @property
    def xnack(self) -> bool:
        return self.supports_xnack

    @property
    def sramecc(self) -> bool:
        return self.supports_sramecc

    @property
    def is_generic(self) -> bool:
        return bool(self.members)

    def features(self) -> tuple[str, ...]:
        """Target-id features this target accepts, in target-id order."""
        return tuple(
            f for f, ok in (("sramecc", self.supports_sramecc), ("xnack", self.supports_xnack))
            if ok
        )


_KIB = 1024
_RDNA3 = ("gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152",
          "gfx1153")

TARGETS: dict[str, Target] = {
    t.name: t
    for t in [
        # Older targets that real HIP builds still carry (hipcc --genco fat binaries).
        # GB_ADDR_CONFIG: Linux's gfx_v9_0.c (gfx_v9_0_gpu_early_init, GC 9.4.2) keeps the
        # register's NUM_SHADER_ENGINES and NUM_RB_PER_SE and sets the rest to 0x22014042
        # (4 pipes, 256 B interleave, 16 banks, ...); NUM_SHADER_ENGINES 3: eight shader
        # engines per MI250X die (AMD's CDNA2 block diagram, Hot Chips 34); NUM_RB_PER_SE 0:
        # not in the public record (addrlib reads it only for metadata layouts)
        Target("gfx90a", "gfx9", 64, 0x3F, 64 * _KIB, True, True,
               ("cdna2", "mi250x", "mi250", "mi210"), "CDNA2", gb_addr_config=0x22194042),
        Target("gfx1030", "gfx10", 32, 0x36, 64 * _KIB, False, False,
               ("rdna2", "rx6900xt", "rx6800"), "RDNA2"),
        Target("gfx942", "gfx9", 64, 0x4C, 64 * _KIB, True, True,
               ("cdna3", "mi300x", "mi300a", "mi300", "mi325x"), "CDNA3", "gfx9-4-generic"),
        Target("gfx950", "gfx9", 64, 0x4F, 160 * _KIB, True, True,
               ("cdna4", "mi355x", "mi350x"), "CDNA4", "gfx9-4-generic"),
        # GB_ADDR_CONFIG of gfx1100/gfx1201: amdgpu reads it from the chip on gfx11/gfx12
        # (amdgpu_dm_plane.c's gfx11 modifiers: RREG32_SOC15(GC, 0, regGB_ADDR_CONFIG)), so
        # the kernel source holds no value; these are the configurations Mesa's surface
        # tests run for the two families (src/amd/common/ac_fake_hw_db.h: "gfx11_32pipe",
        # init_gfx11's 0x40 with NUM_PIPES 5 and NUM_PKRS 5: 32 pipes, 32 packers, the pipe
        # count above 16 the kernel's gfx11 modifiers single out; "gfx12_16pipe": NUM_PIPES 4,
        # NUM_PKRS 4). Not read off a real RX 7900 XTX / RX 9070 XT. Tiled layouts:
        # hsa.virtual.isa.tiling_gfx11 (gfx12's patterns do not depend on it)
        Target("gfx1100", "gfx11", 32, 0x41, 64 * _KIB, False, False,
               ("rdna3", "rx7900xtx", "w7900"), "RDNA3", "gfx11-generic",
               gb_addr_config=0x00000545),
        Target("gfx1101", "gfx11", 32, 0x46, 64 * _KIB, False, False, (), "RDNA3",
               "gfx11-generic"),
        Target("gfx1102", "gfx11", 32, 0x47, 64 * _KIB, False, False, (), "RDNA3",
               "gfx11-generic"),
        Target("gfx1103", "gfx11", 32, 0x44, 64 * _KIB, False, False, (), "RDNA3",
               "gfx11-generic"),
        Target("gfx1150", "gfx11", 32, 0x43, 64 * _KIB, False, False, (), "RDNA3.5",
               "gfx11-generic"),
        Target("gfx1151", "gfx11", 32, 0x4A, 64 * _KIB, False, False, (), "RDNA3.5",
               "gfx11-generic"),
        Target("gfx1152", "gfx11", 32, 0x55, 64 * _KIB, False, False, (), "RDNA3.5",
               "gfx11-generic"),
        Target("gfx1153", "gfx11", 32, 0x58, 64 * _KIB, False, False, (), "RDNA3.5",
               "gfx11-generic"),
        Target("gfx1200", "gfx12", 32, 0x48, 64 * _KIB, False, False, (), "RDNA4",
               "gfx12-generic"),
        Target("gfx1201", "gfx12", 32, 0x4E, 64 * _KIB, False, False,
               ("rdna4", "rx9070xt"), "RDNA4", "gfx12-generic", gb_addr_config=0x00000444),
        Target("gfx1250", "gfx12", 32, 0x49, 320 * _KIB, False, False,
               ("cdna5", "mi455x", "mi450", "mi450x"), "CDNA5"),
        # Generic targets (code object v6): one code object for several processors.
        Target("gfx9-4-generic", "gfx9", 64, 0x5F, 64 * _KIB, True, True, (), "CDNA3/4",
               members=("gfx942", "gfx950")),
        Target("gfx11-generic", "gfx11", 32, 0x54, 64 * _KIB, False, False, (), "RDNA3",
               members=_RDNA3),
        Target("gfx12-generic", "gfx12", 32, 0x59, 64 * _KIB, False, False, (), "RDNA4",
               members=("gfx1200", "gfx1201")),
    ]
}

_ALIASES: dict[str, str] = {
    alias: t.name for t in TARGETS.values() for alias in (t.name, *t.aliases)
}
_BY_MACH: dict[int, Target] = {t.mach: t for t in TARGETS.values()}


def known_names() -> list[str]:
    """Every target name and alias `lookup` accepts, names first."""
    names = list(TARGETS)
    return names + sorted(a for a in _ALIASES if a not in TARGETS)


def _unknown(name: str) -> CodeObjectError:
    return CodeObjectError(
        f"unknown AMD GPU target {name!r}; known targets: {', '.join(TARGETS)} "
        f"(aliases: {', '.join(sorted(a for a in _ALIASES if a not in TARGETS))})"
    )


def lookup(name_or_alias: str) -> Target:
    """The Target for a processor name ("gfx942"), alias ("cdna3") or target id.

    Features after a colon are ignored here; `TargetId.parse` checks them.
    Raises CodeObjectError (a ValueError) listing the known names.
    """
    key = str(name_or_alias).strip().lower().split(":", 1)[0]
    key = key.removeprefix("amdgcn-amd-amdhsa--")
    try:
        return TARGETS[_ALIASES[key]]
    except KeyError:
        raise _unknown(str(name_or_alias)) from None


def by_mach(mach: int) -> Target | None:
    """The Target whose EF_AMDGPU_MACH is `mach`, or None when we do not know it."""
    return _BY_MACH.get(mach)


_SIGN = {"+": "on", "-": "off"}


@dataclass(frozen=True)
class TargetId:
    """A processor plus its xnack/sramecc settings, each "any" | "on" | "off"."""

    name: str
    xnack: str = "any"
    sramecc: str = "any"

    def __post_init__(self) -> None:
        for feature in ("xnack", "sramecc"):
            if getattr(self, feature) not in FEATURE_SETTINGS:
                raise CodeObjectError(
                    f"target id feature {feature}={getattr(self, feature)!r} is not one of "
                    f"{', '.join(FEATURE_SETTINGS)}"
                )

    @classmethod
    def parse(cls, text: str | TargetId) -> TargetId:
        """Parse "gfx942:sramecc+:xnack-", an alias ("cdna3"), or a full
        "amdgcn-amd-amdhsa--gfx942:xnack-" triple-prefixed id. Names resolve to canonical."""
        if isinstance(text, TargetId):
            return text
        raw = str(text).strip()
        body = raw.removeprefix("amdgcn-amd-amdhsa--")
        name, *feats = body.split(":")
        target = lookup(name)
        settings: dict[str, str] = {}
        for feat in feats:
            if len(feat) < 2 or feat[-1] not in _SIGN:
                raise CodeObjectError(
                    f"bad target id {raw!r}: feature {feat!r} must be sramecc+/- or xnack+/-"
                )
            fname, value = feat[:-1].lower(), _SIGN[feat[-1]]
            if fname not in ("xnack", "sramecc"):
                raise CodeObjectError(
                    f"bad target id {raw!r}: unknown feature {fname!r} (only sramecc, xnack)"
                )
            if fname in settings:
                raise CodeObjectError(f"bad target id {raw!r}: {fname} given twice")
            if fname not in target.features():
                raise CodeObjectError(
                    f"bad target id {raw!r}: {target.name} does not support {fname}; "
                    f"drop ':{feat}'"
                )
            settings[fname] = value
        return cls(target.name, **settings)

    @property
    def target(self) -> Target:
        return lookup(self.name)

    def __str__(self) -> str:
        out = self.name
        for feature in ("sramecc", "xnack"):  # LLVM's order
            value = getattr(self, feature)
            if value != "any":
                out += f":{feature}{'+' if value == 'on' else '-'}"
        return out


def _runs_on(code_name: str, agent_name: str) -> bool:
    if code_name == agent_name:
        return True
    code_target = TARGETS.get(code_name)
    return code_target is not None and agent_name in code_target.members


def is_compatible(code_object_id: str | TargetId, agent_id: str | TargetId) -> bool:
    """Can a code object built for `code_object_id` run on an agent `agent_id`?

    Same processor (or a generic target that covers the agent's processor), and for each
    feature: the code object says "any", or it equals the agent's setting. An agent id that
    leaves a feature out (unknown setting) accepts either.
    """
    code = TargetId.parse(code_object_id)
    agent = TargetId.parse(agent_id)
    if not _runs_on(code.name, agent.name):
        return False
    for feature in ("xnack", "sramecc"):
        want, have = getattr(code, feature), getattr(agent, feature)
        if want != "any" and have != "any" and want != have:
            return False
    return True


def compatibility_score(code_object_id: str | TargetId, agent_id: str | TargetId) -> int:
    """Higher is a better fit; -1 when not compatible. Prefers the exact processor over a
    generic one, then exact feature settings over "any"."""
    if not is_compatible(code_object_id, agent_id):
        return -1
    code, agent = TargetId.parse(code_object_id), TargetId.parse(agent_id)
    score = 4 if code.name == agent.name else 0
    for feature in ("xnack", "sramecc"):
        if getattr(code, feature) == getattr(agent, feature):
            score += 1
    return score
