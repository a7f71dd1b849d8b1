"""The operations desk in a real browser: Debian's chromium and chromedriver, driven by Selenium.

Usage: console_browser.py CONSOLE_ORIGIN AXE_JS SCREENSHOT_DIR

Reads one JSON command per line on stdin and answers each with one JSON line on stdout, so
the Rust test that drives Writ decides what happens between the browser's steps:
  {"do": "sign_in", "login": "ann"}   a fresh browser signs in at the OpenID provider
  {"do": "wait_row", "prefix": "request-"}   waits (no reload) for a row to arrive
  {"do": "decide", "row": "request-…", "button": "Approve"}
  {"do": "open", "path": "/console/operations/…"}
  {"do": "click", "button": "Reject"}
  {"do": "sign_out"}
  {"do": "images"}   the page's images as the browser decoded them (alt, natural size)
  {"do": "axe"}      axe-core's violations of the page (id, impact)
  {"do": "screenshot", "name": "now"}
  {"do": "quit"}
"""

import json
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

ORIGIN, AXE_JS, SHOTS = sys.argv[1:4]
WAIT_S = 60


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900",
                # The test cluster's own CA is not in the browser's store.
                "--ignore-certificate-errors"]:
        options.add_argument(arg)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def wait(driver):
    return WebDriverWait(driver, WAIT_S)


def sign_in(driver, login):
    driver.get(f"{ORIGIN}/console")
    wait(driver).until(EC.element_to_be_clickable((By.LINK_TEXT, "Sign in"))).click()
    wait(driver).until(EC.presence_of_element_located((By.NAME, "login"))).send_keys(login)
    driver.find_element(By.NAME, "password").send_keys("any")
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    # The provider asks for consent once per client and account.
    wait(driver).until(lambda d: d.current_url.startswith(ORIGIN) or d.find_elements(By.XPATH, "//button[.='Continue']"))
    if not driver.current_url.startswith(ORIGIN):
        driver.find_element(By.XPATH, "//button[.='Continue']").click()
    wait(driver).until(EC.presence_of_element_located((By.ID, "now")))
    return {"url": driver.current_url, "bar": driver.find_element(By.CSS_SELECTOR, "header").text}


def wait_row(driver, prefix):
    # A mark on this very document: gone if the page were reloaded.
    driver.execute_script("window.__writMark = 1;")
    selector = f"tr[id^='{prefix}']"
    # The id is read in the page, in the same step that finds the row: the desk swaps its
    # sections in as the ledger moves, so an element found first may be gone when asked.
    found = wait(driver).until(
        lambda d: d.execute_script("const r = document.querySelector(arguments[0]); return r && r.id;", selector))
    return {"id": found, "reloaded": driver.execute_script("return window.__writMark !== 1;")}


def submit(driver, find):
    """Clicks the button `find` locates and waits for the page the form leads to. The desk swaps
    its sections in when the ledger moves, so a button may be replaced under the click: it is
    found again. A mark on the document tells the next page from this one."""
    driver.execute_script("window.__writNav = 1;")
    for _ in range(10):
        try:
            find().click()
            break
        except (StaleElementReferenceException, WebDriverException):
            # The click may have landed before the error: never click on the next page.
            if driver.execute_script("return window.__writNav !== 1;"):
                break
    wait(driver).until(lambda d: d.execute_script("return window.__writNav !== 1;"))
    wait(driver).until(EC.presence_of_element_located((By.TAG_NAME, "main")))
    return {"url": driver.current_url, "text": driver.find_element(By.TAG_NAME, "main").text}


def decide(driver, row, button):
    return submit(driver, lambda: driver.find_element(By.ID, row).find_element(By.XPATH, f".//button[.='{button}']"))


def open_page(driver, path):
    driver.get(f"{ORIGIN}{path}")
    wait(driver).until(EC.presence_of_element_located((By.TAG_NAME, "main")))
    return {"url": driver.current_url, "text": driver.find_element(By.TAG_NAME, "main").text}


def click(driver, button):
    return submit(driver, lambda: driver.find_element(By.XPATH, f"//button[.='{button}']"))


def sign_out(driver):
    return submit(driver, lambda: driver.find_element(By.XPATH, "//button[.='Sign out']"))


def images(driver):
    # Waits until every image finished loading (decoded or failed), then reports each.
    wait(driver).until(lambda d: d.execute_script("return Array.from(document.images).every(i => i.complete);"))
    return {"images": driver.execute_script(
        "return Array.from(document.images).map(i => ({alt: i.alt, width: i.naturalWidth, height: i.naturalHeight}));")}


def axe(driver):
    with open(AXE_JS, encoding="utf-8") as f:
        driver.execute_script(f.read())
    return driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document).then(r => done({passes: r.passes.length,"
        " violations: r.violations.map(v => ({id: v.id, impact: v.impact}))}),"
        " e => done({error: 'axe: ' + String(e)}));")


def main():
    driver = None
    for line in sys.stdin:
        command = json.loads(line)
        what = command["do"]
        try:
            if what == "sign_in":
                if driver:
                    driver.quit()
                driver = browser()
                answer = sign_in(driver, command["login"])
            elif what == "wait_row":
                answer = wait_row(driver, command["prefix"])
            elif what == "decide":
                answer = decide(driver, command["row"], command["button"])
            elif what == "open":
                answer = open_page(driver, command["path"])
            elif what == "click":
                answer = click(driver, command["button"])
            elif what == "sign_out":
                answer = sign_out(driver)
            elif what == "images":
                answer = images(driver)
            elif what == "axe":
                answer = axe(driver)
            elif what == "screenshot":
                driver.save_screenshot(f"{SHOTS}/{command['name']}.png")
                answer = {}
            elif what == "quit":
                break
            else:
                answer = {"error": f"unknown command {what}"}
        except Exception as e:  # the test reports it with the page it happened on
            page = driver.current_url if driver else None
            answer = {"error": f"{type(e).__name__}: {e}", "url": page}
        print(json.dumps(answer), flush=True)
    if driver:
        driver.quit()


if __name__ == "__main__":
    main()
