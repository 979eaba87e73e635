"""Where a Spark job's connector jars come from: the caller's list, else ``$WATCHTOWER_SPARK_JARS``."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchtower.spark.session import ENV_SPARK_JARS, configured_jars, expand_jars


def test_a_directory_stands_for_its_jars_in_name_order(tmp_path: Path) -> None:
    for name in ("b.jar", "a.jar", "notes.txt"):
        (tmp_path / name).write_text("")
    single = tmp_path / "elsewhere" / "c.jar"
    assert expand_jars([tmp_path, str(single)]) == [str(tmp_path / "a.jar"), str(tmp_path / "b.jar"), str(single)]


def test_the_environment_names_jars_and_folders_separated_by_commas(tmp_path: Path) -> None:
    (tmp_path / "x.jar").write_text("")
    other = tmp_path / "y.jar"
    assert configured_jars({ENV_SPARK_JARS: f"{tmp_path}, {other},"}) == [str(tmp_path / "x.jar"), str(other)]
    assert configured_jars({}) == []


def test_a_folder_without_jars_says_how_to_get_them(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=f"no Spark Kafka connector jars in {tmp_path}.*{ENV_SPARK_JARS}"):
        configured_jars({ENV_SPARK_JARS: str(tmp_path)})
