"""The `//pipelink_rules:arch` build setting and the transition `fused_kernel` applies.

The architecture a component is compiled for is part of the configuration, not an
attribute of the component: one `cuda_component` can then serve kernels for several
architectures, and Bazel keeps one set of objects/packages per architecture (each in its
own output directory). `fused_kernel(arch = ...)` transitions its `components` to that
architecture; a component built on its own follows `--//pipelink_rules:arch` (default
sm_90a).
"""

load(":errors.bzl", "display_label", "pl_fail")
load(":providers.bzl", "PipelinkArchInfo")

# Architectures the linker accepts (tools/pipelink/linker/contract_types.py ARCHES).
SUPPORTED_ARCHS = ["sm_90a", "sm_100a", "sm_120a", "sm_90", "sm_80"]
DEFAULT_ARCH = "sm_90a"

# Canonical label string of the setting, so the transition works from any module that
# loads these rules (the main repo or a workspace that depends on pipelink).
ARCH_SETTING = str(Label("//pipelink_rules:arch"))

def suggest_arch(arch):
    """The supported architecture a bad value most likely meant (sm_100 -> sm_100a), else the default."""
    for cand in [arch + "a", "sm_" + arch, "sm_" + arch + "a", arch.replace("compute_", "sm_"), arch.lower()]:
        if cand in SUPPORTED_ARCHS:
            return cand
    return DEFAULT_ARCH

def check_arch(ctx_or_label, arch, what = "attribute arch", hint = None):
    """B-ARCH unless `arch` is supported. Returns arch.

    Args:
      ctx_or_label: where the value was given (for the diagnostic).
      arch: the value.
      what: which attribute or flag gave it.
      hint: the fix; default `set arch = "<suggestion>"`.
    """
    if arch not in SUPPORTED_ARCHS:
        pl_fail(ctx_or_label, "B-ARCH", "%s: unsupported architecture '%s'; supported: %s" %
                                        (what, arch, ", ".join(SUPPORTED_ARCHS)),
                hint or 'set arch = "%s"' % suggest_arch(arch))
    return arch

def _arch_setting_impl(ctx):
    value = ctx.build_setting_value
    return [PipelinkArchInfo(arch = check_arch(ctx, value, "build setting value", "pass --%s=%s" % (display_label(ctx.label), suggest_arch(value))))]

arch_setting = rule(
    implementation = _arch_setting_impl,
    build_setting = config.string(flag = True),
    doc = "A string build setting naming the GPU architecture (one of SUPPORTED_ARCHS).",
)

def _arch_transition_impl(settings, attr):
    # An unsupported value is reported by fused_kernel's own implementation, so the error
    # names the kernel target; the components are analysed for the current arch meanwhile.
    if attr.arch not in SUPPORTED_ARCHS:
        return {ARCH_SETTING: settings[ARCH_SETTING]}
    return {ARCH_SETTING: attr.arch}

arch_transition = transition(
    implementation = _arch_transition_impl,
    inputs = [ARCH_SETTING],
    outputs = [ARCH_SETTING],
)
