//! The names `inspect` recognises, best first in each list: what a column is called in the chat
//! schemas tidemark has met (the seeds' schemas, Synapse, the scenario schema).

/// Conversation key names, best first.
pub const CONVERSATION: &[&str] = &[
    "conv_id",
    "conversation_id",
    "conversation",
    "room_id",
    "channel_id",
    "chat_id",
    "group_id",
    "dialog_id",
    "thread_id",
];
/// User key names, best first.
pub const USER: &[&str] = &[
    "user_id",
    "member_id",
    "account_id",
    "participant_id",
    "profile_id",
    "uid",
];
/// Sender names, best first (`user_id` only on a table named like messages).
pub const SENDER: &[&str] = &[
    "sender_id",
    "sender",
    "author_id",
    "from_user_id",
    "sender_user_id",
    "from_id",
    "author",
];
/// Message position names, best first: a sequence allocated per conversation beats an id.
pub const POSITION: &[&str] = &[
    "seq",
    "sequence",
    "position",
    "stream_ordering",
    "id",
    "message_id",
    "msg_id",
];
/// Creation time names, best first.
pub const CREATED: &[&str] = &[
    "created_at",
    "sent_at",
    "created",
    "inserted_at",
    "created_on",
    "origin_server_ts",
    "ts",
];
/// Counter names, best first; any other integer column whose name holds `unread` comes after.
pub const COUNTER: &[&str] = &[
    "unread_count",
    "unread",
    "unread_messages",
    "unread_messages_count",
    "unread_message_count",
    "unread_msg_count",
    "msg_count",
    "message_count",
    "messages_count",
    "notif_count",
    "notification_count",
    "unseen_count",
    "badge_count",
];
/// Read position columns in a receipts table, best first.
pub const RECEIPT_POSITION: &[&str] = &[
    "message_id",
    "last_read_id",
    "last_read_message_id",
    "event_stream_ordering",
    "stream_ordering",
    "read_up_to",
    "position",
    "seq",
    "msg_id",
];
/// Flags and times on a messages row that a legacy counter usually did not count.
pub const NOT_COUNTABLE: &[&str] = &[
    "is_deleted",
    "deleted",
    "is_system",
    "is_hidden",
    "hidden",
    "is_draft",
    "deleted_at",
    "removed_at",
    "redacted_at",
];
