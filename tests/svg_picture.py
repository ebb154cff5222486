"""Reading a timeline picture back: its elements by the SVG ids the renderer gives them
(see `triggers/timeline/_plot.py`)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"


def parse(data: bytes) -> ET.Element:
    return ET.fromstring(data)  # noqa: S314 (our own picture, not untrusted input)


def element(root: ET.Element, gid: str) -> ET.Element:
    found = root.find(f".//{SVG}g[@id='{gid}']")
    assert found is not None, f"no element {gid!r} in the picture"
    return found


def ids(root: ET.Element) -> set[str]:
    """The ids of every group in the picture."""
    return {str(node.get("id")) for node in root.iter(f"{SVG}g") if node.get("id")}


def shapes(root: ET.Element, gid: str) -> int:
    """How many bars (paths) or markers (uses) the element `gid` draws."""
    node = element(root, gid)
    return len(node.findall(f"./{SVG}path")) + len(node.findall(f".//{SVG}use"))


def texts(root: ET.Element, gid: str) -> list[str]:
    """The words the element `gid` shows, one per text."""
    return ["".join(node.itertext()) for node in element(root, gid).iter(f"{SVG}text")]


def fills(root: ET.Element, gid: str) -> set[str]:
    """The fill colours of the element's bars."""
    node = element(root, gid)
    return {
        part.split(":")[1].strip()
        for path in node.findall(f"./{SVG}path")
        for part in str(path.get("style")).split(";")
        if part.strip().startswith("fill:")
    }
