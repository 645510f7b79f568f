"""The operator console in a real browser (Debian's headless Chromium, driven by Selenium)
against a running sim stack over real ROS 2: arm, camera, recorder, actor (the policy holds
still; only the human moves the arm) and the teleop node serving the console.

The browser opens the address with the token that the teleop node printed on its standard
output, as the operator does. The test watches the camera view change while the operator
drives with the keyboard, presses every button, and asserts what arrived: intervention flags
and the operator's outcomes in the actor and in the recorded episodes, the re-recorded episode
dropped, pause and resume. The screenshots land in the test's temporary folder (console/), or
in $ROBOT_RL_TEST_ARTIFACTS/console/ when that is set (to keep them, e.g. as CI artifacts).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import urllib.request
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy")

from tests.helpers.ros import free_domain_id, node_process  # noqa: E402
from tests.helpers.common import free_port  # noqa: E402

pytestmark = pytest.mark.browser

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


def wait_for(condition, timeout: float, what: str):
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def browser(tmp_path):
    if not (CHROMIUM and CHROMEDRIVER):
        if os.environ.get("CI"):
            pytest.fail("chromium and chromium-driver are missing: scripts/setup.sh installs them for the tests")
        pytest.skip("chromium / chromedriver not installed (ROBOT_RL_BROWSER=1 bash scripts/setup.sh)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,900"):
        options.add_argument(arg)
    # its profile, crash reports (~/.config/chromium) and dconf cache (~/.cache/dconf) in the test's folder
    home = tmp_path / "browser"
    options.add_argument(f"--user-data-dir={home / 'profile'}")
    env = {**os.environ, "XDG_CONFIG_HOME": str(home / "config"), "XDG_CACHE_HOME": str(home / "cache")}
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER, env=env), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def artifacts(tmp_path) -> Path:
    """Where the screenshots go: $ROBOT_RL_TEST_ARTIFACTS/console if set (kept), else the test's
    temporary folder."""
    kept = os.environ.get("ROBOT_RL_TEST_ARTIFACTS")
    folder = (Path(kept) if kept else tmp_path) / "console"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_console_in_a_browser_drives_the_sim_stack_and_every_button_lands(tmp_path, browser, artifacts):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    from robot_rl.data.store import EpisodeStore

    domain, port, size = free_domain_id(), free_port(), 32
    store_path, run = tmp_path / "session.zarr", tmp_path / "run"
    url = f"http://127.0.0.1:{port}/"
    token = ""

    def state() -> dict:
        with urllib.request.urlopen(f"{url}api/state?token={token}", timeout=5) as r:
            return json.loads(r.read())

    def click(button: str):
        browser.find_element(By.ID, f"btn-{button}").click()

    def shot(name: str):
        browser.save_screenshot(str(artifacts / f"{name}.png"))

    with node_process("robot_rl.drivers.arm_node", {"seed": 3}, domain, tmp_path), \
            node_process("robot_rl.drivers.camera_node", {"name": "front", "height": size, "width": size}, domain,
                         tmp_path), \
            node_process("robot_rl.drivers.recorder_node", {"path": str(store_path), "cameras": "[front]",
                                                            "image_size": f"[{size},{size}]", "privileged": True},
                         domain, tmp_path), \
            node_process("robot_rl.drivers.actor_node", {"policy": "teleop", "cameras": "[front]",
                                                         "image_size": f"[{size},{size}]", "run_dir": str(run),
                                                         "max_episode_steps": 100_000},  # only the operator ends them
                         domain, tmp_path) as actor, \
            node_process("robot_rl.teleop.teleop_node", {"devices": "[gamepad]", "console_port": port,
                                                         "cameras": "[front]"}, domain, tmp_path, name="teleop"):
        printed = wait_for(lambda: re.search(rf"operator console: ({re.escape(url)}\?token=(\S+))",
                                             (tmp_path / "teleop.log").read_text()), 60, "the console's address")
        operator_url, token = printed.groups()
        wait_for(lambda: _reachable(url, token), 60, "the console to serve")
        browser.get(operator_url)
        wait_for(lambda: browser.current_url == url, 10, "the token off the address bar")
        wait_for(lambda: state()["linked"] and "front" in state()["cameras"], 60, "the actor and the camera")
        image = wait_for(lambda: _loaded(browser, "cam-front"), 30, "the camera view in the page")
        before = image.screenshot_as_png
        shot("01_policy_driving")
        assert "console only" in browser.find_element(By.ID, "devices").text  # no gamepad here: console alone

        # toggle intervention on, drive forward and up with the keyboard: the view changes
        click("toggle")
        wait_for(lambda: state()["intervening"], 10, "intervention on")
        wait_for(lambda: "HUMAN" in browser.find_element(By.ID, "intervening").text, 10, "the HUMAN badge")
        body = browser.find_element(By.TAG_NAME, "body")
        ActionChains(browser).key_down("w", body).key_down("r", body).perform()
        time.sleep(2.0)
        ActionChains(browser).key_up("w", body).key_up("r", body).perform()
        wait_for(lambda: image.screenshot_as_png != before, 10, "the camera view to change")
        shot("02_human_driving")

        # hand back, then success: the actor ends the episode as the operator says
        click("toggle")
        wait_for(lambda: not state()["intervening"], 10, "intervention off")
        click("success")
        first = wait_for(lambda: state()["history"], 15, "the first episode to end")
        assert first[0]["success"] and first[0]["intervention_rate"] > 0
        click("failure")
        wait_for(lambda: len(state()["history"]) >= 2, 15, "the failure to end an episode")
        assert state()["history"][1]["success"] is False and state()["history"][1]["intervention_rate"] == 0
        click("reset")
        wait_for(lambda: len(state()["history"]) >= 3, 15, "the reset to end an episode")
        click("rerecord")
        wait_for(lambda: len(state()["history"]) >= 4, 15, "the re-record to end an episode")

        click("pause")
        wait_for(lambda: state()["paused"], 10, "the actor to pause")
        wait_for(lambda: browser.find_element(By.ID, "btn-pause").text == "Resume", 10, "the Resume button")
        shot("03_paused")
        click("pause")  # now the Resume button
        wait_for(lambda: not state()["paused"], 10, "the actor to resume")

        # hold: intervening only while the button is held down
        hold = browser.find_element(By.ID, "btn-hold")
        ActionChains(browser).click_and_hold(hold).perform()
        wait_for(lambda: state()["intervening"], 10, "intervention while holding")
        shot("04_holding")
        ActionChains(browser).release(hold).perform()
        wait_for(lambda: not state()["intervening"], 10, "intervention released")
        click("success")
        wait_for(lambda: len(state()["history"]) >= 5, 15, "the last episode to end")
        shot("05_charts")
        browser.refresh()  # no token in the address any more: the page's cookie carries it
        wait_for(lambda: browser.find_element(By.ID, "link").text == "stack live", 30, "the reloaded page live")
        actor.terminate()
        actor.wait(30)

    summary = json.loads((run / "actor_summary.json").read_text())
    ends = [(e["success"], e["reward_source"], e["ended_by"]) for e in summary["episode_log"][:5]]
    assert ends == [(True, "operator", None), (False, "operator", None), (False, "ground_truth", "reset"),
                    (False, "ground_truth", "rerecord"), (True, "operator", None)]
    assert summary["rerecorded"] == 1 and summary["interventions"] >= 2 and summary["intervention_steps"] > 10
    log = summary["episode_log"]
    assert log[0]["interventions"] == 1 and log[4]["interventions"] == 1 and log[1]["intervention_steps"] == 0

    store = EpisodeStore.open(store_path)
    assert len(store) >= 4  # the re-recorded episode is not in it
    episodes = [store.get_episode(i, ["is_intervention", "success", "action", "has_action"]) for i in range(4)]
    first, second, third, last = episodes
    acted = first["has_action"]
    assert first["is_intervention"][acted].any() and first["success"][-1]
    human = first["action"][first["is_intervention"] & acted]
    assert (human[:, 0] > 0.3).any() and (human[:, 2] > 0.3).any()  # the keys the browser held: forward, up
    assert not second["is_intervention"].any() and not second["success"][-1]
    assert not third["is_intervention"].any()
    assert last["is_intervention"].any() and last["success"][-1]
    assert len(list(artifacts.glob("*.png"))) >= 5


def _reachable(url: str, token: str) -> bool:
    try:
        urllib.request.urlopen(f"{url}api/state?token={token}", timeout=2).close()
        return True
    except OSError:
        return False


def _loaded(browser, element_id: str):
    from selenium.common.exceptions import NoSuchElementException
    from selenium.webdriver.common.by import By

    try:
        element = browser.find_element(By.ID, element_id)
    except NoSuchElementException:
        return None
    return element if browser.execute_script("return arguments[0].naturalWidth", element) > 0 else None

