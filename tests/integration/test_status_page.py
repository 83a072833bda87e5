#!/usr/bin/env python3
"""The admin status page (GET / on the admin listener, docs/admin-api.md) driven in headless Chromium.

2 prefill + 1 decode pdsim workers behind pdrouter with an admin token file. The page is served without
the token but holds no data; the test types the token, waits for the 3 workers and their one compat group,
drains prefill-0 with its button, checks the state in the page and through the API, activates it again,
and leaves a screenshot in the build dir (status_page.png). A prefill that dies shows up under "Recent errors".

Needs Debian's chromium, chromium-driver and python3-selenium (scripts/install-deps.sh --test installs them);
exits 77 (skipped) when one is missing. Run with /usr/bin/python3, which sees Debian's dist-packages.
Every wait is a WebDriverWait or pdtest.poll_until on the event; nothing sleeps to synchronize.
"""

import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdtest  # noqa: E402
from pdtest import check, request, request_json  # noqa: E402
from test_router import router, sim  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:
    webdriver = None


def skip_reason():
    if webdriver is None:
        return "python3-selenium is not installed"
    for p in (CHROMIUM, CHROMEDRIVER):
        if not os.access(p, os.X_OK):
            return "%s is missing (apt-get install chromium chromium-driver)" % p
    return None


def browser(profile):
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-dev-shm-usage", "--window-size=1280,800", "--user-data-dir=" + profile):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


# The page rebuilds its tables on every refresh (2 s), so an element found a moment ago may be gone:
# every lookup runs inside a WebDriverWait that ignores StaleElementReferenceException and retries.
def state_cell(drv, wid):
    rows = drv.find_elements(By.CSS_SELECTOR, 'tr[data-worker="%s"] td.state-cell' % wid)
    return rows[0].text if rows else None


def click(drv, wid, button):
    """Clicks the worker row's button (drain, activate); True once clicked, for WebDriverWait."""
    drv.find_element(By.CSS_SELECTOR, 'tr[data-worker="%s"] button.%s' % (wid, button)).click()
    return True


def main():
    why = skip_reason()
    if why:
        print("skipped: " + why)
        return 77
    tok = "page-token-%d" % os.getpid()
    fd, tpath = tempfile.mkstemp(prefix="pdrouter-token-")
    with os.fdopen(fd, "w") as f:
        f.write(tok + "\n")
    profile = tempfile.mkdtemp(prefix="pdtest-chromium-")
    drv = None
    try:
        p0, p1, d = sim("prefill"), sim("prefill"), sim("decode")
        r = router([p0, p1], [d], config="admin: { host: 127.0.0.1, port: {admin}, token_file: %s }\n"
                   "health: { interval_ms: 200, fall: 1, rise: 1 }" % tpath)
        aport = r.ports["admin"]
        auth = {"Authorization": "Bearer " + tok}

        # The page needs no token and holds no data; the API behind it stays closed without one.
        st, h, body = request(aport, "GET", "/")
        check(st == 200 and h.get("content-type", "").startswith("text/html"), "GET /: %d %r" % (st, h), r)
        check(b"<script" in body and tok.encode() not in body and b"http://127.0.0.1" not in body,
              "the page is static and holds no worker data", r)
        check("default-src 'none'" in h.get("content-security-policy", ""), "CSP: %r" % h, r)
        for path in ("/admin/v1/workers", "/admin/v1/events", "/admin/v1/status"):
            st, _, _ = request(aport, "GET", path)
            check(st == 401, "%s without the token: %d" % (path, st), r)
        ev = request_json(aport, "GET", "/admin/v1/events", headers=auth)
        check(ev["events"] == [] and ev["total"] == 0 and ev["capacity"] == 32, "no events yet: %r" % ev, r)

        drv = browser(profile)
        wait = WebDriverWait(drv, 10, poll_frequency=0.05, ignored_exceptions=[StaleElementReferenceException])
        drv.get("http://127.0.0.1:%d/" % aport)
        # A token is configured: the page asks for it, and a wrong one is refused.
        box = wait.until(lambda x: x.find_element(By.ID, "token") if x.find_element(By.ID, "token").is_displayed()
                         else None)
        box.send_keys("wrong")
        drv.find_element(By.ID, "login-button").click()
        wait.until(lambda x: "refused" in x.find_element(By.ID, "error").text)
        box = drv.find_element(By.ID, "token")
        box.send_keys(tok)
        drv.find_element(By.ID, "login-button").click()
        wait.until(lambda x: len(x.find_elements(By.CSS_SELECTOR, "#workers tr")) == 3)
        ids = [e.get_attribute("data-worker") for e in drv.find_elements(By.CSS_SELECTOR, "#workers tr")]
        check(ids == ["prefill-0", "prefill-1", "decode-0"], "rows: %r" % ids, r)
        check(drv.execute_script("return sessionStorage.getItem('pdrouter-admin-token')") == tok,
              "token kept in sessionStorage", r)
        wait.until(lambda x: state_cell(x, "prefill-0") == "healthy")
        url = "http://127.0.0.1:%d" % p0.port
        wait.until(lambda x: url in x.find_element(By.CSS_SELECTOR, 'tr[data-worker="prefill-0"]').text)

        # The compat groups: the three pdsims report one identity, so one group of 2 prefills and 1 decode.
        g = pdtest.poll_until(lambda: request_json(aport, "GET", "/admin/v1/workers/decode-0",
                                                   headers=auth)["compat_group"], 10, "the decode's identity read")
        wait.until(lambda x: [e.text for e in x.find_elements(By.CSS_SELECTOR, '#groups tr[data-group="%s"] td' % g)]
                   [:3] == [g, "default", "pdsim"])
        cells = [e.text for e in drv.find_elements(By.CSS_SELECTOR, '#groups tr[data-group="%s"] td' % g)]
        check(cells[-2:] == ["2", "1"] and len(drv.find_elements(By.CSS_SELECTOR, "#groups tr")) == 1,
              "groups table: %r" % cells, r)
        wait.until(lambda x: g in x.find_element(By.CSS_SELECTOR, 'tr[data-worker="prefill-0"]').text)

        # Drain with the button: idle, so it goes straight to drained (maybe through draining).
        wait.until(lambda x: click(x, "prefill-0", "drain"))
        wait.until(lambda x: state_cell(x, "prefill-0") == "drained")
        w = request_json(aport, "GET", "/admin/v1/workers/prefill-0", headers=auth)
        check(w["state"] == "drained", "API after the Drain button: %r" % w, r)
        check(state_cell(drv, "prefill-1") == "healthy", "prefill-1 untouched", r)

        # Kill prefill-1: the health check marks it unhealthy, which the page lists as a recent error.
        p1.stop()
        wait.until(lambda x: state_cell(x, "prefill-1") == "unhealthy")
        wait.until(lambda x: "prefill-1" in x.find_element(By.ID, "events").text)
        ev = request_json(aport, "GET", "/admin/v1/events", headers=auth)
        check(ev["total"] >= 1 and ev["events"][-1]["worker"] == "prefill-1" and ev["events"][-1]["time"].endswith("Z"),
              "events: %s" % json.dumps(ev), r)

        out = os.path.join(pdtest.build_dir(), "status_page.png")
        check(drv.save_screenshot(out), "screenshot to %s" % out, r)

        # Activate with the button: back to healthy, in the page and in the API.
        wait.until(lambda x: click(x, "prefill-0", "activate"))
        wait.until(lambda x: state_cell(x, "prefill-0") == "healthy")
        w = request_json(aport, "GET", "/admin/v1/workers/prefill-0", headers=auth)
        check(w["state"] == "healthy", "API after the Activate button: %r" % w, r)
        errs = [e for e in drv.get_log("browser") if e.get("level") == "SEVERE"] if hasattr(drv, "get_log") else []
        check(not [e for e in errs if "401" not in e.get("message", "")], "browser console errors: %r" % errs, r)
        print("status page OK; screenshot in %s" % out)
        return 0
    finally:
        if drv is not None:
            drv.quit()
        pdtest.stop_all()
        shutil.rmtree(profile, ignore_errors=True)
        os.unlink(tpath)


if __name__ == "__main__":
    sys.exit(main())
