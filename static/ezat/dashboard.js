// Progressive enhancements only: every form works without this file.
(function () {
  "use strict";
  document.documentElement.classList.add("js");

  // The phone layout's menu button: the nav and account links collapse behind it.
  document.querySelectorAll(".nav-toggle").forEach(function (button) {
    var bar = button.closest(".topbar");
    button.addEventListener("click", function () {
      var open = bar.classList.toggle("open");
      button.setAttribute("aria-expanded", open ? "true" : "false");
    });
  });

  // Selects that submit their form on change (org switcher, member roles).
  document.querySelectorAll("form[data-autosubmit] select").forEach(function (select) {
    select.addEventListener("change", function () { select.form.submit(); });
  });

  // Confirm destructive actions (key revocation).
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.getAttribute("data-confirm"))) event.preventDefault();
    });
  });

  // Copy buttons. The Clipboard API needs a secure context; fall back to selecting the text.
  document.querySelectorAll("[data-copy]").forEach(function (button) {
    button.addEventListener("click", function () {
      var field = document.querySelector(button.getAttribute("data-copy"));
      if (!field) return;
      var done = function () {
        button.textContent = "Copied";
        setTimeout(function () { button.textContent = "Copy"; }, 2000);
      };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(field.value).then(done, function () { field.select(); });
      } else {
        field.select();
        try { if (document.execCommand("copy")) done(); } catch (e) { /* text stays selected */ }
      }
    });
  });
})();
