// The registry's feeds (GET /v1/feeds), each linking to its live page.
const status = document.getElementById("status");
const body = document.querySelector("#feeds tbody");

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

try {
  const resp = await fetch("/v1/feeds");
  const answer = await resp.json();
  if (!resp.ok) throw new Error(`${answer.error.code}: ${answer.error.message}`);
  for (const feed of answer.feeds) {
    const row = body.insertRow();
    row.dataset.feedId = feed.feed_id;
    const link = document.createElement("a");
    link.href = `/feeds/${feed.feed_id}`;
    link.textContent = feed.feed_id;
    cell(row, "").append(link);
    cell(row, feed.name, "name");
    cell(row, feed.stream_id, "stream");
    cell(row, feed.description);
    cell(row, feed.owner, "owner");
  }
  status.textContent = `${answer.feeds.length} feed(s)`;
} catch (err) {
  status.textContent = `could not list the feeds: ${err.message}`;
  status.className = "error";
}
