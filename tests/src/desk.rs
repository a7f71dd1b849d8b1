//! The operations desk over HTTP, as a browser without a script would use it: signed in with
//! `writ dev`'s first operator's credential, reading pages and posting the forms they hold.

use std::time::Duration;

use crate::procs::DevProcess;

/// A signed-in desk of a `writ dev`.
pub struct Desk {
    http: reqwest::Client,
    pub origin: String,
    cookie: String,
}

impl Desk {
    /// Signs in at `dev`'s console with its first operator's session credential.
    pub async fn sign_in(dev: &DevProcess) -> Desk {
        let trust = writ_client::ClientTls::trusting(std::path::Path::new(dev.var("WRIT_CA_FILE"))).expect("dev CA");
        let builder = reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none());
        let http = trust.apply(builder).timeout(Duration::from_secs(20)).build().expect("client");
        let origin = dev.var("WRIT_ADMIN_URL").to_string();
        let credential = dev.var("WRIT_CONSOLE_CREDENTIAL");
        let signed = http
            .post(format!("{origin}/console/sign-in/credential"))
            .header("origin", &origin)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(serde_urlencoded::to_string([("credential", credential)]).expect("form"))
            .send()
            .await
            .expect("the console answers");
        assert_eq!(signed.status(), 303, "signed in");
        let cookie =
            signed.headers()["set-cookie"].to_str().expect("cookie").split(';').next().expect("pair").to_string();
        Desk { http, origin, cookie }
    }

    /// A page: status and HTML.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let r = self.http.get(format!("{}{path}", self.origin)).header("cookie", &self.cookie).send().await;
        let r = r.expect("the console answers");
        (r.status().as_u16(), r.text().await.expect("a page"))
    }

    /// Posts `form` from this origin: status, and the redirect's target or the page.
    pub async fn post(&self, path: &str, form: &[(&str, &str)]) -> (u16, String) {
        let r = self
            .http
            .post(format!("{}{path}", self.origin))
            .header("cookie", &self.cookie)
            .header("origin", &self.origin)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(serde_urlencoded::to_string(form).expect("form"))
            .send()
            .await
            .expect("the console answers");
        let status = r.status().as_u16();
        match r.headers().get("location").and_then(|l| l.to_str().ok()).map(str::to_string) {
            Some(at) => (status, at),
            None => (status, r.text().await.expect("a page")),
        }
    }
}

/// The value of the first hidden input `name` of a page.
pub fn hidden(html: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    html.split(&marker).nth(1).and_then(|v| v.split('"').next()).unwrap_or_default().to_string()
}
