"""The API reference covers the public API: every name in the ``__all__`` of a public module has an autosummary entry
(hence a generated page) in ``docs/api/*.rst``, and no entry names something that is not public. The .rst sources
are parsed here, so this needs no Sphinx and runs with the rest of the suite; the guides' Python blocks run in
tests/test_readme.py, beside the README's."""

import importlib
import pathlib
import pkgutil
import re
import types

import pytest

import attnkit

ROOT = pathlib.Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api"
# The modules users import, each with a page of its own in docs/api/.
PUBLIC_MODULES = ["attnkit", "attnkit.ops", "attnkit.reference", "attnkit.nn", "attnkit.feature_maps", "attnkit.text",
                  "attnkit.decoding", "attnkit.metrics", "attnkit.datasets", "attnkit.io", "attnkit.pretrained",
                  "attnkit.plotting", "attnkit.batching", "attnkit.testing", "attnkit.testing.strategies",
                  "attnkit.testing.gguf", "attnkit.serve"]
# Public-looking modules without a page of their own, and why.
UNDOCUMENTED = {
    "attnkit.estimators": "its __all__ is the estimators, documented where users import them: attnkit",
    "attnkit.cli": "the attnkit command (demo, serve, bench, show-config): the user guides show its use",
}


def _rst_entries():
    """(documented names, documented modules, {page: module}) read from the autosummary/automodule directives."""
    names, modules, pages = set(), set(), {}
    for page in sorted(API.glob("*.rst")):
        current, in_autosummary = None, False
        for line in page.read_text(encoding="utf-8").splitlines():
            directive = re.match(r"\.\. (currentmodule|automodule|autosummary)::\s*(\S*)", line)
            if directive:
                kind, argument = directive.groups()
                in_autosummary = kind == "autosummary"
                if kind != "autosummary":
                    current = argument
                if kind == "automodule":
                    modules.add(argument)
                    pages[page.stem] = argument
                continue
            if in_autosummary:
                if line.strip() and not line.startswith(" "):
                    in_autosummary = False
                elif line.strip() and not line.strip().startswith(":"):
                    assert current, f"{page.name}: an autosummary before any currentmodule"
                    names.add(f"{current}.{line.strip()}")
    return names, modules, pages


NAMES, MODULES, PAGES = _rst_entries()


def _public(module_name):
    module = importlib.import_module(module_name)
    return module, list(module.__all__)


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_name_has_an_api_page(module_name):
    assert module_name in MODULES, f"{module_name} has no page in docs/api/ (an automodule directive)"
    module, public = _public(module_name)
    missing = []
    for name in public:
        value = getattr(module, name)
        if isinstance(value, types.ModuleType):
            # A module in __all__ (attnkit.ops, attnkit.nn.serialize): its own page or its own entry.
            if value.__name__ not in MODULES and f"{module_name}.{name}" not in NAMES:
                missing.append(name)
        elif f"{module_name}.{name}" not in NAMES:
            missing.append(name)
    assert not missing, f"public names of {module_name} with no entry in docs/api/*.rst: {missing}"


def test_the_api_pages_name_only_public_names():
    public = {f"{m}.{name}" for m in PUBLIC_MODULES for name in _public(m)[1]}
    stale = sorted(NAMES - public)
    assert not stale, f"docs/api/*.rst lists names that are not in their module's __all__: {stale}"


def test_every_module_page_is_in_the_api_index():
    index = (API / "index.rst").read_text(encoding="utf-8")
    listed = set(re.findall(r"^   (\w+)\s*$", index, flags=re.MULTILINE))
    assert set(PAGES) <= listed, f"API pages missing from docs/api/index.rst: {sorted(set(PAGES) - listed)}"
    assert set(PAGES.values()) == set(PUBLIC_MODULES)


def test_every_public_subpackage_is_documented_or_excused():
    found = {f"attnkit.{info.name}" for info in pkgutil.iter_modules(attnkit.__path__) if not info.name.startswith("_")}
    unaccounted = sorted(found - set(PUBLIC_MODULES) - set(UNDOCUMENTED))
    assert not unaccounted, f"modules of attnkit with neither an API page nor a reason for none: {unaccounted}"
