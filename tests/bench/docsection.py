# SPDX-License-Identifier: BSD-3-Clause
"""docsection.py --- put one benchmark's section into docs/benchmarks.md.

A section sits between "<!-- NAME:begin -->" and "<!-- NAME:end -->"; it
replaces the one already there, or is appended.
"""
import os


def replace_section(md, name, lines):
    text = open(md).read() if os.path.exists(md) else "# ext4lazy benchmarks\n"
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    section = begin + "\n" + "\n".join(lines) + end + "\n"
    if begin in text:
        text = (text[:text.index(begin)] + section
                + text[text.index(end) + len(end) + 1:])
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(md, "w") as f:
        f.write(text)
