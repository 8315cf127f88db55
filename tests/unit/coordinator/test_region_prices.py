"""A run across regions priced per region (coordinator/region_prices.py): each region's prices
of the run's machines, the label that says so, and a region the snapshot does not price:
counted at the first region's prices without a budget, refused with one."""

from __future__ import annotations

from pathlib import Path

import pytest

from expo_executor.coordinator.config import CoordinatorConfig
from expo_executor.coordinator.region_prices import price_regions, region_weights
from expo_executor.coordinator.settings import ExecutorSettings
from expo_executor.core.errors import ExpoError
from expo_executor.core.scheduler import Pool
from expo_executor.cost import prices

pytestmark = pytest.mark.unit

TYPE = "e2-standard-2"


def _config(region: str = "us-central1") -> CoordinatorConfig:
    table = prices.load(region)
    return CoordinatorConfig(
        run_id="r", slots_per_worker=2, max_workers=2,
        machine_types={Pool.SPOT: TYPE, Pool.ON_DEMAND: TYPE},
        hourly={Pool.SPOT: table.hourly(TYPE, True), Pool.ON_DEMAND: table.hourly(TYPE, False)},
        prices_label=table.label())


def _settings(regions: str, **given: object) -> ExecutorSettings:
    return ExecutorSettings(engine="gce", gce_zones="us-central1-a", gce_regions=regions,
                            gce_machine_type=TYPE, **given)


def test_each_region_prices_the_runs_machines_and_a_vm_is_priced_where_it_ran() -> None:
    config, said = _config(), []
    tables = price_regions(_settings("europe-west1"), config, said.append)
    europe = prices.load("europe-west1")
    assert set(tables) == {"us-central1", "europe-west1"}
    assert config.price(Pool.SPOT, None, "europe-west1") == europe.hourly(TYPE, spot=True)
    assert config.on_demand_price(Pool.SPOT, "europe-west1") == europe.hourly(TYPE, spot=False)
    assert config.price(Pool.SPOT, None, "") == config.hourly[Pool.SPOT]  # not listed yet
    assert config.prices_label.endswith("us-central1, europe-west1")
    weights = region_weights(_settings("europe-west1"), config, tables, Path("/nonexistent"))
    spot = europe.hourly(TYPE, spot=True)  # with the default prior's rework on top
    assert weights is not None and spot < weights("europe-west1", Pool.SPOT, None) < 2 * spot
    assert weights("europe-west1", Pool.ON_DEMAND, None) == europe.hourly(TYPE, spot=False)


def test_an_unpriced_region_is_counted_at_the_first_regions_prices_or_refused_with_a_budget(
        ) -> None:
    config, said = _config(), []
    price_regions(_settings("asia-east1"), config, said.append)
    assert "asia-east1" not in config.region_hourly
    assert config.price(Pool.SPOT, None, "asia-east1") == config.hourly[Pool.SPOT]
    assert any("asia-east1 is not priced" in line and "us-central1's prices" in line
               for line in said), said
    with pytest.raises(ExpoError, match="no prices for region asia-east1"):
        price_regions(_settings("asia-east1", budget=5.0), _config(), said.append)


def test_one_region_is_priced_as_before() -> None:
    config = _config()
    assert price_regions(ExecutorSettings(engine="gce", gce_zones="us-central1-a,us-central1-b",
                                          gce_machine_type=TYPE), config, print) == {}
    assert config.region_hourly == {}
