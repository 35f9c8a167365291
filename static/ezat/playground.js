// The Playground: streams a run (Responses API events) from the dashboard's relay (which calls the gateway with the
// session's own key; no key is ever in this page) and renders answer, TTFT, tokens and cost.
(function () {
  "use strict";
  var form = document.getElementById("playground-form");
  if (!form) return;
  var $ = function (id) { return document.getElementById(id); };
  var model = $("pg-model"), reasoning = $("pg-reasoning"), system = $("pg-system"), prompt = $("pg-prompt");
  var answer = $("pg-answer"), thinking = $("pg-thinking"), thinkingBox = $("pg-thinking-box");
  var errorBox = $("pg-error"), facts = $("pg-facts"), runButton = $("pg-run"), code = $("pg-code");
  var apiBase = form.getAttribute("data-api-base");
  var stopButton = $("pg-stop"), spinner = $("pg-spinner"), promptError = $("pg-prompt-error");
  var stopped = $("pg-stopped");
  var controller = null;  // the running request's AbortController (Stop aborts it)

  function running(on) {
    runButton.disabled = on;
    stopButton.hidden = !on;
    spinner.hidden = !on;
  }

  stopButton.addEventListener("click", function () {
    if (controller) controller.abort();
  });
  prompt.addEventListener("input", function () {
    if (prompt.value.trim()) { promptError.hidden = true; prompt.removeAttribute("aria-invalid"); }
  });
  var current = "curl";

  function levels() {
    var option = model.options[model.selectedIndex];
    var allowed = (option && option.getAttribute("data-efforts") || "").split(" ").filter(Boolean);
    Array.prototype.forEach.call(reasoning.options, function (o) {
      o.disabled = o.value !== "" && allowed.indexOf(o.value) < 0;
      if (o.disabled && o.selected) reasoning.value = "";
    });
  }

  function payload() {
    return { model: model.value, reasoning: reasoning.value, system: system.value, prompt: prompt.value };
  }

  function py(s) { return JSON.stringify(s); }

  function snippet(kind) {
    var p = payload();
    var req = { model: p.model };
    if (p.system.trim()) req.instructions = p.system;
    req.input = p.prompt;
    req.reasoning = p.reasoning ? { effort: p.reasoning, summary: "auto" } : { summary: "auto" };
    req.stream = true;
    if (kind === "curl") {
      return "curl -N " + apiBase + "/openai/v1/responses \\\n" +
        "  -H \"Authorization: Bearer $EZAT_API_KEY\" \\\n" +
        "  -H \"Content-Type: application/json\" \\\n" +
        "  -d '" + JSON.stringify(req, null, 2).replace(/'/g, "'\\''") + "'";
    }
    if (kind === "openai") {
      return "import os\nfrom openai import OpenAI\n\n" +
        "client = OpenAI(base_url=" + py(apiBase + "/openai/v1") + ", api_key=os.environ[\"EZAT_API_KEY\"])\n" +
        "stream = client.responses.create(\n    model=" + py(p.model) + ",\n" +
        (p.system.trim() ? "    instructions=" + py(p.system) + ",\n" : "") +
        "    input=" + py(p.prompt) + ",\n" +
        "    reasoning=" + JSON.stringify(req.reasoning) + ",\n" +
        "    stream=True,\n)\nfor event in stream:\n" +
        "    if event.type == \"response.output_text.delta\":\n        print(event.delta, end=\"\")\n";
    }
    if (kind === "anthropic") {
      return "import os\nimport anthropic\n\n" +
        "client = anthropic.Anthropic(base_url=" + py(apiBase) + ", api_key=os.environ[\"EZAT_API_KEY\"])\n" +
        "with client.messages.stream(\n    model=" + py(p.model) + ",\n    max_tokens=4096,\n" +
        (p.system.trim() ? "    system=" + py(p.system) + ",\n" : "") +
        "    messages=[{\"role\": \"user\", \"content\": " + py(p.prompt) + "}],\n" +
        ") as stream:\n    for text in stream.text_stream:\n        print(text, end=\"\")\n";
    }
    return "import OpenAI from \"openai\";\n\n" +
      "const client = new OpenAI({ baseURL: " + py(apiBase + "/openai/v1") + ", apiKey: process.env.EZAT_API_KEY });\n" +
      "const stream = await client.responses.create(" + JSON.stringify(req, null, 2) + ");\n" +
      "for await (const event of stream) {\n" +
      "  if (event.type === \"response.output_text.delta\") process.stdout.write(event.delta);\n}\n";
  }

  function refreshCode() { code.value = snippet(current); }

  document.querySelectorAll("#pg-tabs [data-snippet]").forEach(function (button) {
    button.addEventListener("click", function () {
      current = button.getAttribute("data-snippet");
      document.querySelectorAll("#pg-tabs [data-snippet]").forEach(function (b) { b.classList.toggle("active", b === button); });
      refreshCode();
    });
  });
  [model, reasoning, system, prompt].forEach(function (el) { el.addEventListener("input", refreshCode); });
  model.addEventListener("change", function () { levels(); refreshCode(); });
  levels();
  refreshCode();

  function showError(message) { errorBox.textContent = message; errorBox.hidden = false; }

  function onEvent(name, data, started, state) {
    if (name === "ezat_error") {
      var err = data.body && data.body.error;
      showError("HTTP " + data.status + ": " + (err && err.message ? err.message : JSON.stringify(data.body)));
      return;
    }
    if (name === "ezat_usage") {
      facts.hidden = false;
      if (data.missing) { $("pg-cost").textContent = "not recorded yet — see the request log"; return; }
      $("pg-tokens").textContent = (data.input_tokens + data.cache_read_tokens + data.cache_write_tokens) + " / " + data.output_tokens +
        (data.reasoning_tokens ? " (" + data.reasoning_tokens + " reasoning)" : "");
      $("pg-cost").textContent = data.cost || ("$" + data.cost_usd);
      var link = $("pg-detail");
      link.textContent = data.request_id;
      link.href = data.detail_url;
      return;
    }
    // The Responses API's stream events (named by `event:` and by `type` in the data).
    if (name === "error") { showError(data.message || JSON.stringify(data)); return; }
    if (name === "response.failed") {
      var failure = data.response && data.response.error;
      showError(failure && failure.message ? failure.message : "The request failed.");
      return;
    }
    if (name === "response.reasoning_summary_text.delta" && data.delta) {
      thinkingBox.hidden = false;
      thinking.textContent += data.delta;
      return;
    }
    if (name === "response.output_text.delta" && data.delta) {
      if (!state.first) {
        state.first = true;
        facts.hidden = false;
        $("pg-ttft").textContent = ((performance.now() - started) / 1000).toFixed(2) + " s";
      }
      answer.textContent += data.delta;
    }
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    // An empty prompt is answered here, next to the field (issue 34), not sent to the gateway.
    if (!prompt.value.trim()) {
      promptError.hidden = false;
      prompt.setAttribute("aria-invalid", "true");
      prompt.focus();
      return;
    }
    stopped.hidden = true;
    answer.textContent = ""; thinking.textContent = ""; thinkingBox.hidden = true;
    errorBox.hidden = true; facts.hidden = true;
    ["pg-ttft", "pg-tokens", "pg-cost"].forEach(function (id) { $(id).textContent = "—"; });
    running(true);
    controller = new AbortController();
    var started = performance.now();
    var state = { first: false };
    fetch(form.getAttribute("data-run-url"), {
      method: "POST",
      credentials: "same-origin",
      headers: {
        "Content-Type": "application/json",
        "X-CSRFToken": form.querySelector("[name=csrfmiddlewaretoken]").value
      },
      body: JSON.stringify(payload()),
      signal: controller.signal
    }).then(function (response) {
      if (!response.ok) {
        return response.json().then(function (body) {
          showError(body.error && body.error.message ? body.error.message : "HTTP " + response.status);
        }, function () { showError("HTTP " + response.status); });
      }
      var reader = response.body.getReader();
      var decoder = new TextDecoder();
      var buffer = "";
      function pump() {
        return reader.read().then(function (result) {
          if (result.done) return;
          buffer += decoder.decode(result.value, { stream: true }).replace(/\r\n/g, "\n");
          var cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            var block = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            var name = "message", data = [];
            block.split("\n").forEach(function (line) {
              if (line.indexOf("event:") === 0) name = line.slice(6).trim();
              else if (line.indexOf("data:") === 0) data.push(line.slice(5).replace(/^ /, ""));
            });
            if (!data.length) continue;
            var parsed;
            try { parsed = JSON.parse(data.join("\n")); } catch (e) { continue; }
            if (name === "message" && parsed && parsed.type) name = parsed.type;
            onEvent(name, parsed, started, state);
          }
          return pump();
        });
      }
      return pump();
    }).catch(function (e) {
      // Stop aborts the stream: the relay sees the client leave, the gateway bills what was
      // produced (as for any client that disconnects).
      if (e && e.name === "AbortError") stopped.hidden = false;
      else showError("The run failed: " + e);
    }).then(function () { controller = null; running(false); });
  });
})();
