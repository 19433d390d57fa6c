"""A class's submissions: one folder per student mirroring kernels/, or one archive per student
(unpacked with tarfile's `data` filter and zipfile's own path checks: nothing lands outside
the student's folder, no links, no devices)."""
from __future__ import annotations

import shutil
import tarfile
import zipfile
from pathlib import Path

ARCHIVES = (".zip", ".tar", ".tar.gz", ".tgz")


def _safe_extract(archive: Path, dest: Path) -> str | None:
    """Unpack a student's archive into `dest`; None, or why it was refused."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if archive.suffix == ".zip":
            with zipfile.ZipFile(archive) as z:
                if any(n.startswith("/") or ".." in Path(n).parts for n in z.namelist()):
                    return "the archive has members outside its folder"
                z.extractall(dest)
        else:
            with tarfile.open(archive) as t:
                if any(m.issym() or m.islnk() for m in t.getmembers()):
                    return "the archive has links in it (only files and folders are accepted)"
                t.extractall(dest, filter="data")  # refuses absolute paths, '..', devices
    except tarfile.FilterError as e:
        return f"the archive has members outside its folder ({e})"
    except (zipfile.BadZipFile, tarfile.TarError, OSError, EOFError) as e:
        return f"the archive cannot be read: {e}"
    return None


def discover(submissions: Path, work: Path) -> dict[str, tuple[Path | None, str | None]]:
    """student -> (root folder holding dayNN/..., or None with the reason)."""
    found = {}
    for entry in sorted(submissions.iterdir()):
        if entry.name.startswith("."):
            continue
        name = entry.name
        for ext in ARCHIVES:
            if name.endswith(ext):
                name = name[: -len(ext)]
                break
        if entry.is_dir():
            found[name] = (entry, None)
        elif entry.name.endswith(ARCHIVES):
            dest = work / "unpacked" / name
            shutil.rmtree(dest, ignore_errors=True)
            err = _safe_extract(entry, dest)
            found[name] = (None, err) if err else (dest, None)
    return found


def locate(root: Path, day: str, filename: str) -> Path | None:
    """The student's file for an exercise (e.g. day02, silu_and_mul.cu), in the layouts students
    actually hand in."""
    for base in (root, root / "kernels"):
        if (base / day / filename).is_file():
            return base / day / filename
    subdirs = [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
    if len(subdirs) == 1 and not (root / day).exists():  # an archive with one top folder
        return locate(subdirs[0], day, filename)
    return None
