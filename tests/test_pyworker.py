"""gpuwm.spark.jvm.pyworker: a zipimporter reads its archive's directory again
only when the archive changed (in a fresh interpreter: the fix is
process-wide)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import importlib, os, sys, zipfile, zipimport
    from gpuwm.spark.jvm.pyworker import cached_zip_directories

    path = sys.argv[1]
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pkg/__init__.py", "")
        z.writestr("pkg/a.py", "X = 1")
    sys.path.insert(0, path)
    import pkg.a
    assert cached_zip_directories() and cached_zip_directories()  # once, however often asked
    reads = []
    eager = zipimport._read_directory
    zipimport._read_directory = lambda archive: reads.append(archive) or eager(archive)
    importlib.invalidate_caches()
    first = len(reads)  # read once more, to know the archive as it is now
    importlib.invalidate_caches()
    importlib.invalidate_caches()
    again = len(reads) - first
    with zipfile.ZipFile(path, "a") as z:  # the archive changes: a module added
        z.writestr("pkg/b.py", "Y = 2")
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
    importlib.invalidate_caches()
    import pkg.b
    print(first, again, len(reads) - first - again, pkg.b.Y)
""")


@pytest.mark.skipif(not (3, 10) <= sys.version_info[:2] < (3, 13), reason="only Python 3.10-3.12 re-read eagerly")
def test_an_unchanged_archive_is_not_read_again_and_a_changed_one_is(tmp_path):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "m.zip")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    first, again, changed, y = map(int, out.stdout.split())
    assert first >= 1  # the archive and its package: each zipimporter read it once after the fix went in
    assert again == 0  # unchanged: not read again, however often the caches are invalidated
    assert changed >= 1 and y == 2  # changed: read again, and its new module imports
