import ast
import os
import pathlib
import subprocess
import sys

import kiln

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_stub_names_every_binding():
    tree = ast.parse((ROOT / "python/kiln/__init__.pyi").read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    public = {n for n in dir(kiln._kiln) if not n.startswith("_")}
    assert public - names == set(), "bound but missing from python/kiln/__init__.pyi"


def test_tour_runs(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, str(ROOT / "examples/python/tour.py"), "cpu:0"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "kernel 'scale' applied: [ 0. 10. 20." in out.stdout
    assert "accuracy" in out.stdout
