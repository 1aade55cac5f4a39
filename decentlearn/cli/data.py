"""``decentlearn download``: fetch a data set (with a progress bar per file)."""

from __future__ import annotations

from decentlearn.cli.parser import UsageError


def cmd_download(args) -> int:
    from tqdm import tqdm

    from decentlearn.data import download, download_dir

    bars: dict[str, tqdm] = {}

    def progress(filename: str, done: int, total: int | None) -> None:
        bar = bars.get(filename)
        if bar is None:
            bar = bars[filename] = tqdm(total=total, desc=filename, unit="B", unit_scale=True)
        bar.update(done - bar.n)

    try:
        path = download(args.name, download_dir(args.name, args.data_dir), progress=progress,
                        base_url=args.mirror)
    except (OSError, ValueError) as e:  # offline, HTTP errors, bad checksums, unwritable dir
        for bar in bars.values():
            bar.close()
        bars.clear()
        reason = " ".join(str(e).split()) or type(e).__name__
        raise UsageError(f"download {args.name}: {reason}") from None
    finally:
        for bar in bars.values():
            bar.close()
    print(f"{args.name}: files in {path}")
    return 0
