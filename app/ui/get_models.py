"""Get models: the Hugging Face Hub searched from the window, a repository's models with
the fit of each on this machine (from its header, read by ranges), and the downloads
with their progress, pause, resume and cancel. The Hub is asked only from here, when the
user searches or downloads, on daemon threads (``event_loop.off_thread``: leaving never
waits for the network)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.hub import downloads as queue
from app.core.hub.access import HubError
from app.core.hub.listing import ModelChoice, RepoFiles, RepoSummary
from app.core.hub.service import Judged, ModelHub
from app.core.llama.memory import format_bytes
from app.ui import event_loop

T = TypeVar("T")
SORTS = (("Most downloaded", "downloads"), ("Most liked", "likes"),
         ("Recently updated", "recent"))
BEST = "★ best fit"
VERDICT = 3  # the column of the fit
TICK_MS = 250
CHOICE_ROLE = Qt.ItemDataRole.UserRole + 1


class _Relay(QObject):
    """A download's changes, from the download thread to the GUI thread."""

    job_changed = Signal(object)  # a download's Job


class DownloadRow(QFrame):
    """One download: its name, a progress bar, bytes, speed and time left, and what can
    be done with it now."""

    use_requested = Signal(object)  # the model's Path

    def __init__(self, job: queue.Job, hub: ModelHub, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("downloadRow")
        self.job, self._hub = job, hub
        self.name = QLabel(f"<b>{job.label}</b> · {job.repo}", self)
        self.bar = QProgressBar(self)
        self.bar.setObjectName("downloadProgress")
        self.bar.setAccessibleName(f"Download of {job.label}")
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        self.bar.setFixedHeight(8)
        self.status = QLabel(self)
        self.status.setObjectName("downloadStatus")
        self.status.setWordWrap(True)
        self.pause_button = self._button("Pause", "pauseDownloadButton", self._on_pause)
        self.cancel_button = self._button("Cancel", "cancelDownloadButton",
                                          lambda: hub.downloads.cancel(job))
        self.use_button = self._button("Use this model", "useModelButton",
                                       lambda: self.use_requested.emit(job.path))
        top = QHBoxLayout()
        top.addWidget(self.name, 1)
        for button in (self.pause_button, self.cancel_button, self.use_button):
            top.addWidget(button)
        column = QVBoxLayout(self)
        column.setContentsMargins(8, 6, 8, 6)
        column.addLayout(top)
        column.addWidget(self.bar)
        column.addWidget(self.status)
        self.show_job()

    def _button(self, text: str, name: str, slot: Callable[[], object]) -> QPushButton:
        button = QPushButton(text, self)
        button.setObjectName(name)
        button.clicked.connect(slot)
        return button

    def _on_pause(self) -> None:
        if self.job.state in (queue.PAUSED, queue.FAILED):
            self._hub.downloads.resume(self.job)
        else:
            self._hub.downloads.pause(self.job)

    def show_job(self) -> None:
        job = self.job
        self.bar.setValue(int(1000 * job.done / job.total) if job.total else 0)
        sizes = f"{format_bytes(job.done)} of {format_bytes(job.total)}"
        if job.state == queue.DOWNLOADING:
            speed = f" · {format_bytes(int(job.speed))}/s" if job.speed else ""
            left = f" · {queue.duration(job.eta_s)} left" if job.eta_s is not None else ""
            text = f"{sizes}{speed}{left}"
        elif job.state == queue.DONE:
            text = f"Downloaded, sha256 checked · {job.path}"
        elif job.state == queue.FAILED:
            text = f"Stopped: {job.error}"
        else:
            text = {queue.QUEUED: f"Waiting · {sizes}", queue.PAUSED: f"Paused · {sizes} kept",
                    queue.CANCELLED: "Cancelled"}[job.state]
        self.status.setText(text)
        active = job.state in (queue.QUEUED, queue.DOWNLOADING, queue.PAUSED, queue.FAILED)
        self.pause_button.setText("Resume" if job.state in (queue.PAUSED, queue.FAILED)
                                  else "Pause")
        self.pause_button.setVisible(active)
        self.cancel_button.setVisible(active)
        self.use_button.setVisible(job.state == queue.DONE)


class GetModelsDialog(QDialog):
    """A window of its own beside the chat; ``use_requested`` asks the chat to load a
    downloaded model, ``downloaded`` tells it one is in the models folder."""

    use_requested = Signal(object)  # Path
    downloaded = Signal(object)  # Job

    def __init__(self, hub: ModelHub, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("getModelsDialog")
        self.setWindowTitle("Get models")
        self.hub = hub
        self._tasks = event_loop.Tasks()
        self._relay = _Relay(self)
        self._relay.job_changed.connect(self._on_job_changed)
        self._asked = 0  # counts searches and listings: an older one's answer is dropped
        self.files: RepoFiles | None = None
        self.judged: dict[str, Judged] = {}
        self.rows: dict[int, DownloadRow] = {}
        hub.downloads.on_change = self._relay.job_changed.emit
        # Progress is told at most five times a second, so the last bytes before a
        # stall, and a speed falling to nothing, are read here while a download runs.
        self._ticker = QTimer(self)
        self._ticker.setInterval(TICK_MS)
        self._ticker.timeout.connect(self._tick)
        self._build()
        self.resize(980, 680)
        for job in [*hub.downloads.jobs, *hub.downloads.find_unfinished()]:
            self._row_for(job)

    def _build(self) -> None:
        top = self._build_search()
        split = self._build_repo()
        scroll = self._build_downloads()
        downloads_title = QLabel("<b>Downloads</b> — into the models folder; a download "
                                 "stopped by a cut, a quit or a crash goes on from where it "
                                 "stopped", self)
        downloads_title.setWordWrap(True)
        column = QVBoxLayout(self)
        column.addLayout(top)
        column.addWidget(self.message)
        column.addWidget(split, 3)
        column.addWidget(downloads_title)
        column.addWidget(scroll, 1)

    def _build_search(self) -> QHBoxLayout:
        self.search_box = QLineEdit(self)
        self.search_box.setObjectName("hubSearchBox")
        self.search_box.setAccessibleName("Search the Hugging Face Hub")
        self.search_box.setPlaceholderText("Search the Hugging Face Hub for GGUF models, "
                                           "e.g. qwen3, gemma 3, llama")
        self.search_box.returnPressed.connect(self.search)
        self.sort_box = QComboBox(self)
        self.sort_box.setObjectName("hubSortBox")
        self.sort_box.setAccessibleName("Sort by")
        for text, key in SORTS:
            self.sort_box.addItem(text, key)
        self.sort_box.activated.connect(lambda _: self.search())
        self.search_button = QPushButton("Search", self)
        self.search_button.setObjectName("hubSearchButton")
        self.search_button.clicked.connect(self.search)
        self.message = QLabel("Fireside asks the Hub only when you search or download: "
                              f"{self.hub.access().endpoint}", self)
        self.message.setObjectName("hubMessage")
        self.message.setWordWrap(True)
        top = QHBoxLayout()
        top.addWidget(self.search_box, 1)
        top.addWidget(self.sort_box)
        top.addWidget(self.search_button)
        return top

    def _build_repo(self) -> QSplitter:
        self.results = QListWidget(self)
        self.results.setObjectName("hubResults")
        self.results.setAccessibleName("Repositories found")
        self.results.currentItemChanged.connect(self._on_repo_chosen)
        self.repo_title = QLabel(self)
        self.repo_title.setObjectName("hubRepoTitle")
        self.repo_title.setWordWrap(True)
        self.file_tree = QTreeWidget(self)
        self.file_tree.setObjectName("hubFiles")
        self.file_tree.setAccessibleName("The repository's models")
        self.file_tree.setHeaderLabels(["Model file", "Quantization", "Size",
                                        "On this machine", "Memory"])
        self.file_tree.setRootIsDecorated(False)
        header = self.file_tree.header()
        header.setStretchLastSection(False)  # the file's name takes the room, not Memory
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.file_tree.currentItemChanged.connect(lambda *_: self._show_facts())
        self.facts = QLabel(self)
        self.facts.setObjectName("hubFacts")
        self.facts.setWordWrap(True)
        self.download_button = QPushButton("Download", self)
        self.download_button.setObjectName("hubDownloadButton")
        self.download_button.setEnabled(False)
        self.download_button.clicked.connect(self.download_chosen)

        right = QWidget(self)
        right_column = QVBoxLayout(right)
        right_column.setContentsMargins(0, 0, 0, 0)
        right_column.addWidget(self.repo_title)
        right_column.addWidget(self.file_tree, 1)
        right_column.addWidget(self.facts)
        right_column.addWidget(self.download_button, 0, Qt.AlignmentFlag.AlignRight)
        split = QSplitter(self)
        split.addWidget(self.results)
        split.addWidget(right)
        split.setSizes([360, 620])
        return split

    def _build_downloads(self) -> QScrollArea:
        self.download_list = QWidget(self)
        self.download_column = QVBoxLayout(self.download_list)
        self.download_column.setContentsMargins(0, 0, 0, 0)
        self.download_column.addStretch(1)
        scroll = QScrollArea(self)
        scroll.setObjectName("hubDownloads")
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.download_list)
        scroll.setMinimumHeight(130)
        return scroll

    # Search and a repository ------------------------------------------------------

    def search(self) -> None:
        text, sort = self.search_box.text(), str(self.sort_box.currentData())
        self._say("Searching the Hub…")
        self._ask(lambda: self.hub.search(text, sort), self._show_results)

    def _show_results(self, found: list[RepoSummary]) -> None:
        self.results.clear()
        for repo in found:
            gated = " · gated" if repo.gated else ""
            item = QListWidgetItem(f"{repo.repo}\n{repo.downloads:,} downloads · "
                                   f"{repo.likes:,} likes · {repo.modified}{gated}")
            item.setData(CHOICE_ROLE, repo.repo)
            self.results.addItem(item)
        self._say(_count(len(found), "repository", "repositories") + " with GGUF files"
                  if found else
                  "No GGUF models on the Hub match that.")

    def _on_repo_chosen(self, item: QListWidgetItem | None) -> None:
        if item is None:
            return
        repo = str(item.data(CHOICE_ROLE))
        self.open_repo(repo)

    def open_repo(self, repo: str) -> None:
        self.file_tree.clear()
        self.facts.clear()
        self.download_button.setEnabled(False)
        self.repo_title.setText(f"<b>{repo}</b>")
        self._say(f"Listing {repo}…")
        self._ask(lambda: self.hub.files(repo), self._show_files)

    def _show_files(self, files: RepoFiles) -> None:
        self.files, self.judged = files, {}
        about = [f"license: {files.license or 'not given'}"]
        if files.gated:
            about.append("gated: accept its terms on the Hub and add a token in Settings")
        self.repo_title.setText(f"<b>{files.repo}</b> · {' · '.join(about)}")
        for choice in files.choices:
            item = QTreeWidgetItem([choice.label, choice.quant, format_bytes(choice.size),
                                    "reading its header…", ""])
            item.setTextAlignment(2, Qt.AlignmentFlag.AlignRight)
            item.setData(0, CHOICE_ROLE, choice.label)
            self.file_tree.addTopLevelItem(item)
        if not files.choices:
            self._say(f"{files.repo} has no GGUF model files.")
            return
        self.file_tree.setCurrentItem(self._items()[0])
        self.download_button.setEnabled(True)
        self._say(f"{files.repo}: {_count(len(files.choices), 'model', 'models')}. The fit on "
                  "this machine comes from each file's header (a few MB), read before any "
                  "download.")
        self._tasks.spawn(self._judge_each(files, self._asked))

    async def _judge_each(self, files: RepoFiles, asked: int) -> None:
        """Each file's fit, one header at a time, smallest first (the likeliest to fit),
        until another search or listing is asked."""
        for choice in files.choices:
            try:
                judged = await event_loop.off_thread(
                    lambda c=choice: self.hub.judge(files, c))  # type: ignore[misc]
            except HubError as error:
                if asked == self._asked:
                    self._say(str(error))
                continue
            if asked != self._asked:
                return
            self._show_fit(judged)

    def _show_fit(self, judged: Judged) -> None:
        self.judged[judged.choice.label] = judged
        item = self._item(judged.choice.label)
        if item is not None:
            item.setText(VERDICT, judged.fit.verdict)
            item.setText(VERDICT + 1, judged.fit.needs())
            item.setToolTip(VERDICT, judged.fit.summary())
        best = self.hub.best(list(self.judged.values()))
        for each in self._items():
            marked = best is not None and each.data(0, CHOICE_ROLE) == best.choice.label
            font = QFont(each.font(0))
            font.setBold(marked)
            for column in range(each.columnCount()):
                each.setFont(column, font)
            verdict = each.text(VERDICT).removesuffix(f"  {BEST}")
            each.setText(VERDICT, f"{verdict}  {BEST}" if marked else verdict)
        self._show_facts()

    def _show_facts(self) -> None:
        choice = self.chosen()
        judged = self.judged.get(choice.label) if choice else None
        if judged is None:
            self.facts.setText("")
            return
        self.facts.setText(" · ".join(judged.facts()))

    def chosen(self) -> ModelChoice | None:
        item = self.file_tree.currentItem()
        if item is None or self.files is None:
            return None
        label = item.data(0, CHOICE_ROLE)
        return next((c for c in self.files.choices if c.label == label), None)

    def _item(self, label: str) -> QTreeWidgetItem | None:
        return next((i for i in self._items() if i.data(0, CHOICE_ROLE) == label), None)

    def _items(self) -> list[QTreeWidgetItem]:
        tree = self.file_tree
        found = (tree.topLevelItem(row) for row in range(tree.topLevelItemCount()))
        return [item for item in found if item is not None]

    # Downloads --------------------------------------------------------------------

    def download_chosen(self) -> None:
        choice, files = self.chosen(), self.files
        if choice is None or files is None:
            return
        try:
            job = self.hub.downloads.add(files, choice)
        except HubError as error:
            self._say(str(error))
            return
        self._row_for(job)

    def _row_for(self, job: queue.Job) -> DownloadRow:
        row = self.rows.get(job.id)
        if row is None:
            row = DownloadRow(job, self.hub, self.download_list)
            row.use_requested.connect(self.use_requested)
            self.download_column.insertWidget(0, row)
            self.rows[job.id] = row
        return row

    def _on_job_changed(self, job: queue.Job) -> None:
        row = self._row_for(job)
        before = row.property("state")
        row.show_job()
        row.setProperty("state", job.state)
        if job.state == queue.DONE and before != queue.DONE:
            self.downloaded.emit(job)
        if job.state == queue.DOWNLOADING:
            self._ticker.start()

    def _tick(self) -> None:
        running = [row for row in self.rows.values() if row.job.state == queue.DOWNLOADING]
        for row in running:
            row.show_job()
        if not running:
            self._ticker.stop()

    # The Hub's thread ---------------------------------------------------------------

    def _ask(self, work: Callable[[], T], then: Callable[[T], None]) -> None:
        """Run ``work`` off this thread, then ``then`` here, unless a newer search or
        listing was asked meanwhile; a HubError is said above the results."""
        self._asked += 1
        asked = self._asked

        async def run() -> None:
            try:
                value = await event_loop.off_thread(work)
            except HubError as error:
                if asked == self._asked:
                    self._say(str(error))
                return
            if asked == self._asked:
                then(value)

        self._tasks.spawn(run())

    def _say(self, text: str) -> None:
        self.message.setText(text)


def _count(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"
