"""The main job of the README's first command: what zarrdb was built with."""

import zarrdb


def main() -> None:
    print(f"zarrdb {zarrdb.__version__} with SQLite {zarrdb.sqlite_version}")
    print(f"  source id: {zarrdb.sqlite_source_id}")
    print(f"  compile options: {', '.join(zarrdb.compile_options)}")


if __name__ == "__main__":
    main()
