"""What `lrtransfer inspect` says of a user's module beside its table: what its parameterization's
rules do there that the table cannot show (frozen tensors, a tied readout, muP's zero query), and
what they cannot do from outside the module (an attention scale it keeps); and how a one-line
message lists names.
"""

from __future__ import annotations


class Notes:
    """`wrapped.Custom`'s notes for inspect."""

    def user_names(self) -> dict[int, str]:
        """id(stored tensor) -> the user's name of the parameter it holds."""
        return {id(t): atom.user_names[name] for atom in self.layers.values() for name, t in atom.trained()}

    def _query_notes(self) -> list[str]:
        """Which attention queries (`roles.find_queries`) start at zero in run 0 (muP's zero query), and
        which part of a fused projection that is."""
        zeroed = []
        for atom in self.layers.values():
            if atom.tag == "query":
                w = atom.weight.detach()[0]
                view = w if atom.in_out else w.t()  # (fan_in, fan_out)
                q = atom.query_outputs or atom.fan_out
                if not view[:, :q].any():
                    zeroed.append(atom.path if q == atom.fan_out else f"{atom.path} (outputs 0..{q - 1} of {atom.fan_out})")
        if not zeroed:
            return []
        return [f"note: the attention queries start at zero (muP's zero query): {', '.join(zeroed[:2])}"
                f"{', ...' if len(zeroed) > 2 else ''} ({len(zeroed)} in all)"]

    def notes(self, param) -> list[str]:
        """What `param`'s rules do here that a reader cannot see in the table, and what they cannot
        do from outside the module: frozen tensors (not in the table); a tied readout; a rule for
        attention logits other than SP's 1/sqrt(d) (muP's 1/d), applied where the module exposes its
        scale (after a forward, which counts the scaled_dot_product_attention calls), else a warning;
        and what the rule itself says it cannot reach (`Parameterization.notes`)."""
        out = list(param.notes(self))
        if self.frozen:
            out.append(f"note: frozen, not trained (requires_grad=False): {counted(self.frozen, 6)}; every run holds "
                       f"the module's own values, {self.frozen_source}, with no init rule, multiplier or LR of param={param.name}")
        for atom in self.layers.values():
            if atom.tied is not None:
                out.append(f"note: {atom.user_names['weight']} is tied to the readout {atom.tied.name}: one tensor, "
                           f"one init and LR (an embedding's, role {atom.role}); the readout's forward multiplier "
                           f"({atom.tied.weight_mult:.4g}) reaches only its readout use, as mup's MuSharedReadout")
        zeroed = self._query_notes()
        out += zeroed
        if not self.attention or not param.rescales_attention():
            return out
        rule = param.attention_rule or f"param={param.name}'s attention rule"
        where = ([f"the `scaling` of {len(self.scaled_modules)} attention modules ({listed(self.scaled_modules, 2)})"]
                 if self.scaled_modules else []) + (
                 [f"{self.sdpa_calls} scaled_dot_product_attention calls a forward at their default scale"]
                 if self.sdpa_calls else [])
        if where:
            has_zero_query = hasattr(param, "zero_query")  # muP's rule (said where it is not applied)
            return out + [f"note: {rule} applied through {' and '.join(where)}"
                          + ("" if zeroed or not has_zero_query else "; queries keep their init (muP's zero query is not applied)")]
        return out + [f"warning: {listed(self.attention, 3)} computes attention: {rule} cannot be applied "
                      "from outside the module (it keeps its own scale)"]


def listed(names: list[str], n: int) -> str:
    """The first n names, and `...` when there are more."""
    return ", ".join(names[:n]) + (", ..." if len(names) > n else "")


def counted(names: list[str], n: int) -> str:
    """`listed`, with how many in all where some are left out."""
    return listed(names, n) + (f" ({len(names)} in all)" if len(names) > n else "")
