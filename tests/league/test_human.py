"""The `human` agent of play.py: the board it shows and the moves it accepts, against envpool."""

import numpy as np

from seedlike.league import games, players


def test_render_board_from_the_players_side():
    board = np.zeros((6, 7, 2), bool)
    board[5, 3, 0] = board[5, 4, 1] = board[4, 3, 1] = True  # mine, theirs, theirs
    assert players.render_board(board).splitlines() == [
        "1 2 3 4 5 6 7",
        *[". . . . . . ."] * 4,
        ". . . O . . .",
        ". . . X O . .",
    ]
    ttt = np.zeros((3, 3, 2), bool)
    ttt[1, 1, 0] = ttt[0, 2, 1] = True
    assert players.render_board(ttt, numbered_cells=True) == "1 2 O\n4 X 6\n7 8 9"


class Keyboard:
    """Types a wrong move first, then the first legal choice the prompt offers."""

    def __init__(self):
        self.prompts, self.lines = [], []

    def read(self, prompt):
        self.prompts.append(prompt)
        if len(self.prompts) == 1:
            return "42"
        return prompt.rstrip(": ").split(" ")[-1].split("/")[0]  # "... cell 1/2/5: " -> "1"


def test_a_person_plays_whole_games_one_at_a_time():
    keys = Keyboard()
    human = players.HumanAgent(keys.read, keys.lines.append)
    result = games.play_match("TicTacToe-v1", human, players.RandomAgent(), 3, seed=4)
    assert len(result.outcomes) == 3 and any(result.outcomes), result.outcomes  # not all draws
    said = [line for line in keys.lines if line.startswith("You ") or line == "Draw."]
    outcome = {1: "You win.", 0: "Draw.", -1: "You lose."}
    assert said == [outcome[o] for o in result.outcomes]
    # Each game opens saying who is who and who moves first (an empty board: the person),
    # and ends on its last position: a won or lost game shows the three in a row.
    starts = [i for i, line in enumerate(keys.lines) if line.startswith("New game: ")]
    assert len(starts) == 3 and keys.lines[starts[0]].startswith("New game: X yours, O theirs;")
    for start in starts:
        board = keys.lines[start + 1]
        moved_first = not any(c in board for c in "XO")
        assert keys.lines[start].endswith(f"move {'first' if moved_first else 'second'}.")
    for i, line in enumerate(keys.lines):
        if line in ("You win.", "You lose."):
            final = np.array([row.split() for row in keys.lines[i - 1].splitlines()])
            mark = "X" if line == "You win." else "O"
            lines = [*final, *final.T, final.diagonal(), np.fliplr(final).diagonal()]
            assert any((row == mark).all() for row in lines), keys.lines[i - 1]
    assert "'42' is not a legal cell" in keys.lines[2]
    assert keys.prompts[0].startswith("your move, cell ")
    # One game at a time: within a game every board shown has more stones than the last.
    stones = -1
    for line in keys.lines:
        if line in outcome.values():
            stones = -1
        elif "\n" in line:
            assert line.count("X") + line.count("O") > stones
            stones = line.count("X") + line.count("O")


def test_connect_four_takes_columns_and_end_of_input_ends_the_match():
    def read(prompt):
        assert prompt == "your move, column 1/2/3/4/5/6/7: "
        raise EOFError

    lines = []
    human = players.HumanAgent(read, lines.append)
    result = games.play_match("ConnectFour-v1", human, players.RandomAgent(), 3, seed=0)
    assert result.outcomes == [] and lines[-1] == "no move typed; the match ends"
    assert isinstance(games.make_agent("human"), players.HumanAgent)
