"""Sphinx configuration of attnkit's documentation: numpydoc docstrings, one autosummary page per public name
and an executed sphinx-gallery of ``examples/`` (each ``plot_*.py`` runs at build time, matplotlib on Agg).

Build: ``python -m pip install ".[docs]"`` then ``python -m sphinx -W -b html docs docs/_build/html``.
"""

import inspect
import os
import pathlib
import sys

from sphinx.errors import PycodeError
from sphinx.pycode import ModuleAnalyzer

os.environ.setdefault("MPLBACKEND", "Agg")  # the examples draw off screen, also when they import pyplot first

DOCS = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS))  # _gallery_hooks (the per-example time limit), by name: the config stays picklable

import attnkit  # noqa: E402

project = "attnkit"
author = "the attnkit developers"
copyright = "2026, the attnkit developers"
release = attnkit.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "auto_examples/**/*.ipynb", "auto_examples/**/*.py", "auto_examples/**/*.zip",
                    "auto_examples/**/*.codeobj.json", "auto_examples/**/*.md5", "sg_execution_times.rst"]
default_role = "code"  # `name` in a docstring reads as code, as on GitHub

# One page per public name, written by autosummary from the :toctree: lists of docs/api/*.rst.
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": False}
autodoc_typehints = "none"  # numpydoc's Parameters sections say the types; signatures stay short
autodoc_member_order = "groupwise"
toc_object_entries_show_parents = "hide"  # the page's contents list a class's methods by their own names

# numpydoc renders Parameters / Returns / Examples; the class template lists the methods, so numpydoc's own
# member tables (which would want a stub page per inherited scikit-learn method) are off.
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# scikit-learn's own methods on the estimators (get_params, set_output, the metadata-routing setters) are
# documented by scikit-learn; their docstrings point into scikit-learn's user guide, which this site does not have.
_SKLEARN_REQUEST = ("set_fit_request", "set_partial_fit_request", "set_predict_request", "set_predict_proba_request",
                    "set_score_request", "set_transform_request", "set_predict_log_proba_request",
                    "set_decision_function_request")


def _skip_foreign_members(app, what, name, obj, skip, options):
    if name in _SKLEARN_REQUEST or name == "get_metadata_routing":
        return True
    module = getattr(obj, "__module__", None) or ""
    if module.startswith("sklearn"):
        return True
    return None


def _constant_doc(app, what, name, obj, options, lines):
    """A constant's ``#:`` comment, read from the module that assigns it.

    autodoc reads ``#:`` comments only in the module a name is documented under, so a re-exported constant
    (``attnkit.io.FORMAT_VERSION``, ``attnkit.text.SPECIAL_TOKENS``) would show the docstring of its value's type
    (``str``, ``tuple``); the defining module's comment replaces it, or nothing does.
    """
    type_doc = inspect.getdoc(type(obj)) or ""
    if what != "data" or not lines or lines[0].strip() != type_doc.split("\n")[0].strip():
        return
    short = name.rsplit(".", 1)[-1]
    lines[:] = []
    if short == "__version__":  # imported from the compiled core, where pyproject.toml's version is compiled in
        lines[:] = ["attnkit's version (pyproject.toml's, compiled into the C++ core)."]
        return
    for module_name, module in sorted(sys.modules.items()):
        if not module_name.startswith("attnkit") or getattr(module, short, None) is not obj:
            continue
        try:
            docs = ModuleAnalyzer.for_module(module_name).find_attr_docs()
        except PycodeError:
            continue
        if ("", short) in docs:
            lines[:] = [line for line in docs[("", short)] if line.strip()]
            return


def setup(app):
    app.connect("autodoc-skip-member", _skip_foreign_members)
    app.connect("autodoc-process-docstring", _constant_doc, priority=100)  # before numpydoc (500) reads the lines


html_theme = "pydata_sphinx_theme"
html_title = f"attnkit {release}"
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "secondary_sidebar_items": ["page-toc", "sourcelink"],
}
html_static_path = ["_static"]
html_css_files = ["attnkit.css"]
# The theme's script reads the page's colour mode from here; left empty it logs a console error on every first visit.
html_context = {"default_mode": "auto"}
html_show_sourcelink = True

# The gallery: examples/ (its README.txt is the gallery's header) and one subsection per sub-folder that brings a
# README.txt (examples/course/, examples/models/); a folder without one is skipped, so the build works before the
# course and model examples exist. A failing example fails the build, and so does one that runs over its time limit.
sphinx_gallery_conf = {
    "examples_dirs": ["../examples"],  # paths relative to docs/, as sphinx-gallery compares them
    "gallery_dirs": ["auto_examples"],
    "filename_pattern": r"/plot_",
    "ignore_pattern": r"__init__\.py|/_",
    "subsection_order": ["../examples/course", "../examples/models", "*"],
    "within_subsection_order": "FileNameSortKey",
    "abort_on_example_error": True,
    "only_warn_on_example_error": False,
    "reset_modules": ("matplotlib", "_gallery_hooks.time_limit"),
    "reset_modules_order": "both",
    "download_all_examples": False,
    "show_memory": False,
    "remove_config_comments": True,
    "min_reported_time": 1,
    "backreferences_dir": None,
    "image_scrapers": ("matplotlib",),
    "matplotlib_animations": False,
    "write_computation_times": True,
}
