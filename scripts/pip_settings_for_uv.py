"""Print shell ``export`` lines handing pip's configuration to uv (which reads none of it).

``pip config list`` prints each setting as ``section.name=<repr of the value>``, files first and
``PIP_*`` variables (``:env:``) last, so the last value of a name wins, as in pip. A value may
hold several entries, separated by spaces or newlines.
"""

from __future__ import annotations

import ast
import shlex
import subprocess
import sys

#: pip setting -> (uv variable, separator uv expects between several values)
UV_VARIABLES = {
    "index-url": ("UV_DEFAULT_INDEX", " "),
    "extra-index-url": ("UV_INDEX", " "),
    "find-links": ("UV_FIND_LINKS", ","),
    "constraint": ("UV_CONSTRAINT", " "),
    "cert": ("SSL_CERT_FILE", " "),
}


def pip_settings() -> dict[str, list[str]]:
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                            capture_output=True, text=True, check=True).stdout
    settings: dict[str, list[str]] = {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        name = key.rpartition(".")[2]
        if name in UV_VARIABLES:
            settings[name] = ast.literal_eval(value).split()
    return settings


def main() -> None:
    for name, values in pip_settings().items():
        variable, separator = UV_VARIABLES[name]
        print(f"export {variable}={shlex.quote(separator.join(values))}")


if __name__ == "__main__":
    main()
