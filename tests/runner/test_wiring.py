"""The composition root (madbench.runner.wiring) is the only place providers are chosen: importing a module registers
nothing, and every entry point answers ``rules/…`` models because it builds its gateway there."""

import json
import os
import subprocess
import sys
from pathlib import Path

from madbench.gateway import Gateway
from madbench.gateway.providers.batching import BatchingProvider
from madbench.gateway.providers.litellm_provider import LiteLLMProvider
from madbench.gateway.providers.local import LocalModelProvider
from madbench.gateway.providers.rules import RulesProvider
from madbench.runner.wiring import build_gateway, build_providers

ROOT = Path(__file__).resolve().parents[2]

#: In a fresh interpreter: import every module of madbench (a package's ``__main__`` runs a command, so not those), then
#: report the registry a gateway gets without the composition root, and every module-level provider or registry.
IMPORT_EVERYTHING = """
import importlib, json, pkgutil, sys
from pathlib import Path
import madbench
from madbench.checkout import CHECKOUT_PACKAGES
from madbench.gateway.providers import Providers
own = sorted(p.name for p in Path(madbench.__file__).parent.iterdir() if (p / "__init__.py").is_file())
names = []
for top in [*CHECKOUT_PACKAGES, *own]:
    package = importlib.import_module(f"madbench.{top}")
    names += [i.name for i in pkgutil.walk_packages(package.__path__, f"madbench.{top}.") if not i.name.endswith("__main__")]
for name in names:
    importlib.import_module(name)
declared = Providers.declared()
held = sorted(f"{m}.{k}" for m, mod in list(sys.modules.items()) if m.startswith("madbench")
              for k, v in vars(mod).items()
              if isinstance(v, Providers) or (not isinstance(v, type) and hasattr(v, "complete") and hasattr(v, "is_llm")))
print(json.dumps({"imported": len(names), "prefixes": declared.prefixes,
                  "rules_goes_to": type(declared.for_model("rules/auto")).__name__, "held": held}))
"""


def test_importing_every_module_registers_no_provider_and_holds_no_registry():
    proc = subprocess.run([sys.executable, "-c", IMPORT_EVERYTHING], cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["imported"] > 100  # the walk reached the checkout's packages too, not only madbench/
    assert out["prefixes"] == ["local"] and out["rules_goes_to"] == "LiteLLMProvider"
    assert out["held"] == []


def test_a_gateway_built_without_the_composition_root_has_only_the_declared_providers():
    providers = Gateway().providers
    assert providers.prefixes == ("local",)
    assert isinstance(providers.for_model("local/gemma3-270m"), LocalModelProvider)
    assert isinstance(providers.for_model("rules/auto"), LiteLLMProvider)  # nothing taught it rules/


def test_the_composition_root_adds_the_rule_answers_and_batch_mode_explicitly():
    plain = build_providers()
    assert plain.prefixes == ("local", "rules") and isinstance(plain.for_model("rules/auto"), RulesProvider)
    assert isinstance(plain.for_model("openai/gpt-4o-mini"), LiteLLMProvider)
    batched = build_providers(collector=object())
    assert isinstance(batched.for_model("openai/gpt-4o-mini"), BatchingProvider)
    assert isinstance(batched.for_model("rules/auto"), RulesProvider)  # answered locally, never batched
    assert isinstance(build_providers().for_model("openai/gpt-4o-mini"), LiteLLMProvider)  # batch mode did not leak
    assert isinstance(build_gateway().providers.for_model("rules/auto"), RulesProvider)


def test_llm_ask_routes_a_rules_model_to_the_rule_answers_in_a_fresh_process(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "madbench.runner.cli", "llm", "ask", "--model", "rules/auto", "--prompt", "hi",
                           "--cache-dir", str(tmp_path / "cache")], cwd=ROOT,
                          env=os.environ | {"PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    # The rule-based provider answered (a free-text prompt carries no task for it): not litellm, which knows no "rules".
    assert proc.returncode == 1
    assert "rules/auto answers structured tasks only: the request carries no context" in proc.stderr, proc.stderr
